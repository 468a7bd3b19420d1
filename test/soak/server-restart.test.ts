/**
 * The Temporal server stopped for 25 s during a copy, longer than the gRPC client's own retries
 * (test/chaos/server-restart.ts; 8 s in `npm test`).
 */
import { serverRestartSuite } from '../chaos/server-restart';

serverRestartSuite({ downMs: 25_000, rows: 150_000 });
