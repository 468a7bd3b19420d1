/**
 * SIGKILLs that land, six trials per mode: every activity of both menus is killed once or more
 * (test/chaos/random-kills.ts says what a trial is; `npm test` runs one per mode).
 */
import { randomKillsSuite } from '../chaos/random-kills';

randomKillsSuite(6);
