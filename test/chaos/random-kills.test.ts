/**
 * SIGKILLs that land, one trial per mode (test/chaos/random-kills.ts says what a trial is): the
 * fast tier's share of the suite. `npm run test:soak` runs six per mode, every activity of both
 * menus hit.
 */
import { randomKillsSuite } from './random-kills';

randomKillsSuite(1);
