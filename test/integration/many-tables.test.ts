/** Many tables in one online migration, 30 of them (test/integration/many-tables.ts; 300 in the soak tier). */
import { manyTablesSuite } from './many-tables';

manyTablesSuite(30);
