/**
 * `ferry codec-server`: Temporal's remote codec protocol over HTTP, so the Web UI and the
 * `temporal` CLI can show payloads that Ferry's codec encrypted (src/codec.ts), to people who can
 * reach this server. POST …/encode and …/decode take and return `{"payloads": [Payload JSON]}`
 * (proto3 JSON: metadata values and data in base64); the UI calls it from the browser, hence CORS.
 */
import { createServer, IncomingMessage, ServerResponse } from 'node:http';
import { AddressInfo } from 'node:net';
import type { Payload, PayloadCodec } from '@temporalio/common';
import { JSONToPayload, payloadToJSON } from '@temporalio/common/lib/proto-utils';
import { Command, InvalidArgumentError } from 'commander';
import { CODEC_KEY_ENV, codecFromEnv, CodecKeyError, PayloadDecryptionError } from '../codec';

export const DEFAULT_CODEC_PORT = 8888;
/** `ferry server` prints its UI as 127.0.0.1, browsers often type localhost: allow both. */
export const DEFAULT_CORS_ORIGINS = ['http://localhost:8233', 'http://127.0.0.1:8233'];
const MAX_BODY_BYTES = 64 * 1024 * 1024;

export interface CodecServerOptions {
  codec: PayloadCodec;
  port: number;
  host?: string;
  /** Web UI origins allowed to call the server from a browser. */
  corsOrigins?: string[];
  /** Host header values to answer besides the loopback names and the listening address: `name` (any port) or `name:port`. */
  allowedHosts?: string[];
  report?: (line: string) => void;
}

export interface CodecServer {
  url: string;
  close(): Promise<void>;
}

class HttpError extends Error {
  constructor(
    readonly status: number,
    message: string,
  ) {
    super(message);
  }
}

function readBody(req: IncomingMessage): Promise<string> {
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    let size = 0;
    req.on('data', (chunk: Buffer) => {
      size += chunk.length;
      if (size > MAX_BODY_BYTES) {
        reject(new HttpError(413, `request body over ${MAX_BODY_BYTES} bytes`));
        req.destroy();
      } else chunks.push(chunk);
    });
    req.on('end', () => resolve(Buffer.concat(chunks).toString('utf8')));
    req.on('error', reject);
  });
}

/**
 * No payloads at all comes as `{}` (Go's encoding/json leaves an empty list out: `temporal workflow
 * query` without arguments sends it) or as an empty body: both are zero payloads, not an error.
 */
function parsePayloads(body: string): Payload[] {
  if (body.trim() === '') return [];
  let parsed: unknown;
  try {
    parsed = JSON.parse(body);
  } catch {
    throw new HttpError(400, 'the body is not JSON');
  }
  if (parsed === null || typeof parsed !== 'object' || Array.isArray(parsed)) throw new HttpError(400, 'the body must be {"payloads": [...]}');
  const payloads = (parsed as { payloads?: unknown }).payloads ?? [];
  if (!Array.isArray(payloads)) throw new HttpError(400, 'the body must be {"payloads": [...]}');
  return payloads.map((p, i) => {
    try {
      return JSONToPayload(p);
    } catch {
      throw new HttpError(400, `payloads[${i}] is not a Payload (metadata values and data are base64)`);
    }
  });
}

/**
 * DNS rebinding: a page on another site can make its own name resolve to 127.0.0.1 and then
 * call this server from the browser as same-origin, CORS or not. Its requests still carry that
 * name in Host, so only the addresses the server listens on, the loopback names and the names
 * an operator gives (`--allowed-host`, for a proxy in front) are answered.
 */
export function hostAllowed(host: string | undefined, port: number, listening: string, allowed: string[] = []): boolean {
  if (!host) return false;
  const wanted = host.toLowerCase();
  const local = ['127.0.0.1', 'localhost', '[::1]', listening].map((name) => `${name.toLowerCase()}:${port}`);
  if (local.includes(wanted)) return true;
  const name = wanted.replace(/:\d+$/, '');
  return allowed.some((entry) => {
    const e = entry.trim().toLowerCase();
    return /:\d+$/.test(e) ? e === wanted : e === name;
  });
}

export async function startCodecServer(options: CodecServerOptions): Promise<CodecServer> {
  const origins = options.corsOrigins?.length ? options.corsOrigins : DEFAULT_CORS_ORIGINS;
  const report = options.report ?? (() => undefined);

  const cors = (req: IncomingMessage, res: ServerResponse) => {
    const origin = req.headers.origin;
    res.setHeader('Access-Control-Allow-Origin', origin && origins.includes(origin) ? origin : origins[0]);
    res.setHeader('Vary', 'Origin');
    // The UI can forward its access token (Authorization) and cookies to the codec server.
    res.setHeader('Access-Control-Allow-Credentials', 'true');
    res.setHeader('Access-Control-Allow-Methods', 'POST, OPTIONS');
    res.setHeader('Access-Control-Allow-Headers', 'content-type, x-namespace, authorization');
    res.setHeader('Access-Control-Max-Age', '600');
  };
  const send = (res: ServerResponse, status: number, body: unknown) => {
    res.writeHead(status, { 'Content-Type': 'application/json' });
    res.end(JSON.stringify(body));
  };

  const handle = async (req: IncomingMessage, res: ServerResponse) => {
    cors(req, res);
    if (req.method === 'OPTIONS') {
      res.writeHead(204).end();
      return;
    }
    // The endpoint may carry a prefix (e.g. …/{namespace}/decode): match on the last segment.
    const action = new URL(req.url ?? '/', 'http://codec').pathname.replace(/\/+$/, '').split('/').pop();
    if (action !== 'encode' && action !== 'decode') throw new HttpError(404, 'use POST /encode or POST /decode');
    if (req.method !== 'POST') throw new HttpError(405, `${action} takes POST`);
    const payloads = parsePayloads(await readBody(req));
    const out = action === 'encode' ? await options.codec.encode(payloads) : await options.codec.decode(payloads);
    send(res, 200, { payloads: out.map(payloadToJSON) });
  };

  let listening = { host: '127.0.0.1', port: 0 };
  const server = createServer((req, res) => {
    if (!hostAllowed(req.headers.host, listening.port, listening.host, options.allowedHosts)) {
      report(`codec-server: ${req.method} ${req.url} for Host ${JSON.stringify(req.headers.host ?? '')} → 421`);
      send(res, 421, { error: 'this codec server does not answer for that Host; name it with --allowed-host if a proxy forwards it' });
      return;
    }
    handle(req, res).catch((err: unknown) => {
      const status = err instanceof HttpError ? err.status : err instanceof PayloadDecryptionError ? 422 : 500;
      const message = status === 500 ? 'internal error' : (err as Error).message;
      report(`codec-server: ${req.method} ${req.url} → ${status}: ${(err as Error)?.message ?? String(err)}`);
      if (!res.headersSent) send(res, status, { error: message });
      else res.end();
    });
  });
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(options.port, options.host ?? '127.0.0.1', () => {
      server.off('error', reject);
      resolve();
    });
  });
  const address = server.address() as AddressInfo;
  const host = address.family === 'IPv6' ? `[${address.address}]` : address.address;
  listening = { host, port: address.port };
  return {
    url: `http://${host}:${address.port}`,
    close: () =>
      new Promise<void>((resolve) => {
        server.close(() => resolve());
        server.closeAllConnections();
      }),
  };
}

/** Exit 2, nothing started. (Not a thrown CliExit: main() reads a numeric `code` as commander's.) */
function invalidInput(message: string): void {
  process.stderr.write(`ferry: ${message}\n`);
  process.exitCode = 2;
}

function port(value: string): number {
  const n = Number(value);
  if (!Number.isInteger(n) || n < 0 || n > 65535) throw new InvalidArgumentError('must be a port number (0 picks a free one)');
  return n;
}

export function registerCodecCommand(program: Command): void {
  program
    .command('codec-server')
    .description(`serve Ferry's payload codec over HTTP, so the Temporal Web UI and CLI can show encrypted payloads (needs ${CODEC_KEY_ENV})`)
    .option('--port <port>', 'port to listen on (0 picks a free one)', port, DEFAULT_CODEC_PORT)
    .option('--host <address>', 'interface to listen on; anyone who can reach it can decrypt', '127.0.0.1')
    .option('--cors-origin <origins>', 'Web UI origin(s) allowed to call it, comma-separated', DEFAULT_CORS_ORIGINS.join(','))
    .option('--allowed-host <names>', 'Host header(s) to answer besides 127.0.0.1, localhost and [::1] (a proxy\'s name, name or name:port), comma-separated', '')
    .action(async (opts: { port: number; host: string; corsOrigin: string; allowedHost: string }) => {
      let codec;
      try {
        codec = codecFromEnv(process.env);
      } catch (err) {
        if (err instanceof CodecKeyError) return invalidInput(err.message);
        throw err;
      }
      if (!codec?.keyId) {
        return invalidInput(`${CODEC_KEY_ENV} is not set: give the codec server the same key as the workers (make one with: openssl rand -base64 32)`);
      }
      const corsOrigins = opts.corsOrigin.split(',').map((o) => o.trim()).filter(Boolean);
      const server = await startCodecServer({
        codec,
        port: opts.port,
        host: opts.host,
        corsOrigins,
        allowedHosts: opts.allowedHost.split(',').map((h) => h.trim()).filter(Boolean),
        report: (line) => process.stderr.write(`${line}\n`),
      });
      process.stdout.write(`codec server on ${server.url} (key ${codec.keyId}; CORS for ${corsOrigins.join(', ')})\n`);
      process.stdout.write(`Web UI: temporal server start-dev --ui-codec-endpoint ${server.url}, or the UI's Data Encoder setting\n`);
      await new Promise<void>((resolve) => {
        process.once('SIGINT', () => resolve());
        process.once('SIGTERM', () => resolve());
      });
      await server.close();
    });
}
