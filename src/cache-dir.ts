/** Ferry's cache outside the checkout (~/.cache/ferry, or FERRY_CACHE_DIR): the temporal CLI it built, workflow bundles. */
import { homedir } from 'node:os';
import { join } from 'node:path';

export function cacheDir(): string {
  return process.env.FERRY_CACHE_DIR ?? join(process.env.XDG_CACHE_HOME ?? join(homedir(), '.cache'), 'ferry');
}
