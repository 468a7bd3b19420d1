/** Copy batches sized by bytes: 84 MB of wide rows in transactions of at most about 64 MB (test/integration/batch-size.ts). */
import { batchSizeSuite } from '../integration/batch-size';

batchSizeSuite({ wide: true, others: false });
