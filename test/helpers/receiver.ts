/**
 * A real HTTP receiver for callbacks and event webhooks: records every request and answers with
 * scripted status codes (default 200), so tests can check retries, keys and signatures.
 */
import { createHmac, timingSafeEqual } from 'node:crypto';
import { createServer, IncomingHttpHeaders, Server } from 'node:http';
import { AddressInfo } from 'node:net';

export interface Delivery {
  path: string;
  headers: IncomingHttpHeaders;
  body: string;
  json: Record<string, unknown>;
  answered: number;
  at: number;
}

export class Receiver {
  readonly deliveries: Delivery[] = [];
  /** Status codes for the next requests, in order; then 200. Keyed by path when given per path. */
  private readonly script = new Map<string, number[]>();
  /** Paths answered with a redirect (302 and a Location header) instead. */
  private readonly redirects = new Map<string, string>();

  private constructor(
    private readonly server: Server,
    readonly url: string,
  ) {}

  /** Listens on 127.0.0.1 and a free port unless told otherwise (another loopback address, the same port). */
  static async start(options: { host?: string; port?: number } = {}): Promise<Receiver> {
    const host = options.host ?? '127.0.0.1';
    const self: { receiver?: Receiver } = {};
    const server = createServer((req, res) => {
      const chunks: Buffer[] = [];
      req.on('data', (c: Buffer) => chunks.push(c));
      req.on('end', () => {
        const body = Buffer.concat(chunks).toString('utf8');
        const path = req.url ?? '/';
        const location = self.receiver!.redirects.get(path);
        const answered = location ? 302 : (self.receiver!.script.get(path)?.shift() ?? 200);
        let json: Record<string, unknown> = {};
        try {
          json = JSON.parse(body) as Record<string, unknown>;
        } catch {
          // recorded as is
        }
        self.receiver!.deliveries.push({ path, headers: req.headers, body, json, answered, at: Date.now() });
        res.writeHead(answered, { 'content-type': 'text/plain', ...(location ? { location } : {}) }).end(answered < 300 ? 'ok' : 'no');
      });
    });
    await new Promise<void>((r) => server.listen(options.port ?? 0, host, () => r()));
    self.receiver = new Receiver(server, `http://${host}:${(server.address() as AddressInfo).port}`);
    return self.receiver;
  }

  get port(): number {
    return Number(new URL(this.url).port);
  }

  /** Answers the next requests to `path` with these status codes. */
  answer(path: string, ...statuses: number[]): void {
    this.script.set(path, statuses);
  }

  /** Answers every request to `path` with 302 Found pointing at `location`. */
  redirect(path: string, location: string): void {
    this.redirects.set(path, location);
  }

  to(path: string): Delivery[] {
    return this.deliveries.filter((d) => d.path === path);
  }

  async close(): Promise<void> {
    await new Promise<void>((r) => this.server.close(() => r()));
  }
}

/**
 * Checks `X-Ferry-Signature: t=<unix>,v1=<hex HMAC-SHA256 of "<t>.<body>">` (docs/architecture.md
 * §9) — written out here rather than calling Ferry's own verify, so a wrong change there fails.
 */
export function signatureVerifies(delivery: Delivery, secret: string): boolean {
  const header = String(delivery.headers['x-ferry-signature'] ?? '');
  const match = /^t=(\d+),v1=([0-9a-f]{64})$/.exec(header);
  if (!match) return false;
  const expected = createHmac('sha256', secret).update(`${match[1]}.${delivery.body}`).digest();
  return timingSafeEqual(expected, Buffer.from(match[2], 'hex'));
}
