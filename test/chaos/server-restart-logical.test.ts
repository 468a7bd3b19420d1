/** The Temporal server stopped for 6 s while logical capture streams (test/chaos/server-restart-logical.ts; 25 s in the soak tier). */
import { serverRestartLogicalSuite } from './server-restart-logical';

serverRestartLogicalSuite({ downMs: 6_000 });
