/** Copy batches sized by bytes, all but the 84 MB case of wide rows (test/integration/batch-size.ts; that one in the soak tier). */
import { batchSizeSuite } from './batch-size';

batchSizeSuite({ wide: false, others: true });
