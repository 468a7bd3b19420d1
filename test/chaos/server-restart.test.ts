/** The Temporal server stopped for 8 s during a copy (test/chaos/server-restart.ts; 25 s in the soak tier). */
import { serverRestartSuite } from './server-restart';

serverRestartSuite({ downMs: 8_000, rows: 100_000 });
