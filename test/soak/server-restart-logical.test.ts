/**
 * The Temporal server stopped for 25 s while logical capture streams, longer than the gRPC
 * client's own retries (test/chaos/server-restart-logical.ts; 6 s in `npm test`).
 */
import { serverRestartLogicalSuite } from '../chaos/server-restart-logical';

serverRestartLogicalSuite({ downMs: 25_000 });
