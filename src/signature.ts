/**
 * The callback signature: `X-Ferry-Signature: t=<unix seconds>,v1=<hex HMAC-SHA256 of
 * "<t>.<body>">` (docs/architecture.md §9). Workers sign; a receiver verifies.
 */
import { createHmac, timingSafeEqual } from 'node:crypto';

export function sign(secret: string, timestamp: number, body: string): string {
  const mac = createHmac('sha256', secret).update(`${timestamp}.${body}`).digest('hex');
  return `t=${timestamp},v1=${mac}`;
}

/** Whether `header` signs `body` with `secret` (compared in constant time). */
export function verify(secret: string, header: string, body: string): boolean {
  const match = /^t=(\d+),v1=([0-9a-f]{64})$/.exec(header);
  if (!match) return false;
  const expected = createHmac('sha256', secret).update(`${match[1]}.${body}`).digest();
  return timingSafeEqual(expected, Buffer.from(match[2], 'hex'));
}
