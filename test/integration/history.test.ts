/** A long-running migration's history (test/integration/history.ts) on a server that ends one at 400 events: the wait under writes lasts until a table has continued as new (the soak tier: a minute at least, at 500). */
import { historySuite } from './history';

historySuite({ minWaitMs: 0, historyLimit: 400, others: true });
