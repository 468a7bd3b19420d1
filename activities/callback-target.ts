/**
 * Where a callback may go. The URL comes from whoever may start a migration, while the workers
 * sit inside the network: unchecked, it reaches the cloud metadata service, the databases and
 * anything else only the workers can reach. So the host name is resolved here, once; every
 * address it has must be public unless the workers set FERRY_CALLBACK_ALLOW_PRIVATE=true; and the
 * request then connects to exactly those addresses, because a second lookup could answer
 * differently (DNS rebinding).
 */
import { LookupAddress, promises as dns } from 'node:dns';
import { isIP, LookupFunction } from 'node:net';
import { ApplicationFailure } from '@temporalio/common';
import { isPrivateAddress } from '../src/private-address';
import { FAILURE } from '../src/core/failure-types';

export const ALLOW_PRIVATE_ENV = 'FERRY_CALLBACK_ALLOW_PRIVATE';

/** Every address of a host name, as the operating system's resolver gives them. */
export type Resolve = (host: string) => Promise<LookupAddress[]>;

export const resolveAll: Resolve = (host) => dns.lookup(host, { all: true, verbatim: true });

export interface CheckedTarget {
  url: URL;
  /** The addresses the request may connect to: those that were checked. */
  addresses: LookupAddress[];
}

export function allowsPrivate(env: NodeJS.ProcessEnv): boolean {
  return env[ALLOW_PRIVATE_ENV] === 'true';
}

/**
 * Resolves and checks the URL's host. A refusal is final (no retry changes the answer) and says
 * how to allow it, but not which address the name had: the result goes back to whoever wrote the
 * spec. A failed lookup throws as is, for the caller to report as a network error.
 */
export async function checkTarget(url: URL, options: { allowPrivate: boolean; resolve: Resolve }): Promise<CheckedTarget> {
  const host = url.hostname.replace(/^\[|\]$/g, '');
  const family = isIP(host);
  const addresses = family ? [{ address: host, family }] : await options.resolve(host);
  if (addresses.length === 0) throw Object.assign(new Error(`${host} has no address`), { code: 'ENOTFOUND' });
  if (!options.allowPrivate && addresses.some((a) => isPrivateAddress(a.address))) {
    throw ApplicationFailure.nonRetryable(
      'callback target refused: the URL leads to a loopback, link-local or private address; ' +
        `use a public address, or set ${ALLOW_PRIVATE_ENV}=true on the workers to allow such targets`,
      FAILURE.CallbackTargetRefused,
    );
  }
  return { url, addresses };
}

/** A `lookup` for node:http that answers with the checked addresses only, never asking DNS again. */
export function pinnedLookup(addresses: LookupAddress[]): LookupFunction {
  return (_host, options, callback) => {
    const wanted = options.family === 4 || options.family === 'IPv4' ? 4 : options.family === 6 || options.family === 'IPv6' ? 6 : 0;
    const candidates = wanted ? addresses.filter((a) => a.family === wanted) : addresses;
    if (options.all) return callback(null, candidates);
    if (candidates.length === 0) return callback(Object.assign(new Error('no checked address of that family'), { code: 'ENOTFOUND' }), '', 0);
    return callback(null, candidates[0].address, candidates[0].family);
  };
}
