/**
 * SIGKILLs that land, six trials per mode: every activity of both menus is killed once or more
 * (test/chaos/random-kills.ts says what a trial is; `npm test` runs one per mode). On a
 * PostgreSQL cluster of its own with room for its eight worker processes' sessions: beside the
 * tier's other suite on the shared server (max_connections 100) it failed with "sorry, too many
 * clients already".
 */
import { randomKillsSuite } from '../chaos/random-kills';
import { startPrivateCluster } from '../helpers/private-cluster';

randomKillsSuite(6, () => startPrivateCluster({ max_connections: '300', shared_buffers: "'128MB'" }, 'ferry-rkill-'));
