/** A long-running migration's history (test/integration/history.ts) on a server that ends one at 500 events: at least a minute under writes, waiting for approval. */
import { historySuite } from '../integration/history';

historySuite({ minWaitMs: 60_000, historyLimit: 500, others: false });
