/**
 * Where a callback (or a switch webhook) may go, how it is sent, and the secret it is signed
 * with. The URL comes from whoever may start a migration, while the workers
 * sit inside the network: unchecked, it reaches the cloud metadata service, the databases and
 * anything else only the workers can reach. So the host name is resolved here, once; every
 * address it has must be public unless the workers set FERRY_CALLBACK_ALLOW_PRIVATE=true; and the
 * request then connects to exactly those addresses, because a second lookup could answer
 * differently (DNS rebinding).
 */
import { LookupAddress, promises as dns } from 'node:dns';
import { request as httpRequest } from 'node:http';
import { request as httpsRequest } from 'node:https';
import { isIP, LookupFunction } from 'node:net';
import { ApplicationFailure } from '@temporalio/common';
import { isPrivateAddress } from '../src/private-address';
import { FAILURE } from '../src/core/failure-types';
import { CALLBACK_SECRET_NAME } from '../src/core/spec';

/** How long a POST may take by default (the result callback's and the events'). */
const TIMEOUT_MS = 15_000;

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

/** The secret's value; the spec checked the name already, but a workflow started before that rule (or by another client) reaches here too. */
export function secretValue(env: NodeJS.ProcessEnv, name: string, field = 'callback.secret'): string {
  if (!CALLBACK_SECRET_NAME.test(name)) {
    throw ApplicationFailure.nonRetryable(
      `callback secret variable ${name} is not named FERRY_SECRET_<NAME>: workers sign only with FERRY_SECRET_* variables; rename it on the workers and in ${field}`,
      FAILURE.CallbackSecretRefused,
    );
  }
  const value = env[name];
  if (!value) {
    throw ApplicationFailure.nonRetryable(
      `callback secret variable ${name} is not set on the workers: set it, or remove ${field}`,
      FAILURE.CallbackSecretMissing,
    );
  }
  return value;
}

/** One POST, never following a redirect, to the checked addresses only; resolves with the status. */
export function post(target: CheckedTarget, headers: Record<string, string>, body: string, timeoutMs = TIMEOUT_MS): Promise<number> {
  const request = target.url.protocol === 'https:' ? httpsRequest : httpRequest;
  return new Promise((resolve, reject) => {
    const req = request(
      target.url,
      {
        method: 'POST',
        headers: { ...headers, 'Content-Length': String(Buffer.byteLength(body)) },
        lookup: pinnedLookup(target.addresses),
        // A pooled socket could lead elsewhere than this request's checked addresses.
        agent: false,
        signal: AbortSignal.timeout(timeoutMs),
      },
      (res) => {
        resolve(res.statusCode ?? 0);
        res.destroy(); // the status is all Ferry reads; no receiver keeps a worker streaming
      },
    );
    req.on('error', reject);
    req.end(body);
  });
}
