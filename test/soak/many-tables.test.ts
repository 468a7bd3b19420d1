/** Many tables in one online migration at full size: 300 (test/integration/many-tables.ts; 30 in `npm test`). */
import { manyTablesSuite } from '../integration/many-tables';

manyTablesSuite(300);
