/**
 * Optional payload encryption (docs/operating.md: Payload encryption): a Temporal PayloadCodec that seals each
 * whole Payload (metadata and data, protobuf-encoded) with AES-256-GCM, so Temporal's history,
 * memo and the Web UI hold only ciphertext. Codecs run on the client and in the worker's main
 * thread, never in the workflow sandbox: workflows see plain values.
 *
 * Keys come from the environment: FERRY_CODEC_KEY encrypts (and decrypts); the keys listed in
 * FERRY_CODEC_PREVIOUS_KEYS only decrypt, so a key can rotate while old histories stay readable.
 * Each ciphertext names its key by a fingerprint (`encryption-key-id`), never by the key itself.
 */
import { createCipheriv, createDecipheriv, createHash, randomBytes } from 'node:crypto';
import type { DataConverter, Payload, PayloadCodec } from '@temporalio/common';
import { temporal } from '@temporalio/proto';

export const CODEC_KEY_ENV = 'FERRY_CODEC_KEY';
export const CODEC_PREVIOUS_KEYS_ENV = 'FERRY_CODEC_PREVIOUS_KEYS';
export const ENCRYPTED_ENCODING = 'binary/encrypted';
export const KEY_ID_METADATA = 'encryption-key-id';

const IV_BYTES = 12;
const TAG_BYTES = 16;
const KEY_FORMAT = '32 random bytes as base64 (44 characters) or as 64 hex characters, e.g. `openssl rand -base64 32`';

/** A key that is missing, malformed or not the one a payload was sealed with. */
export class CodecKeyError extends Error {
  constructor(message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.name = 'CodecKeyError';
  }
}

/** A payload that cannot be opened: altered, truncated, or sealed with a different key. */
export class PayloadDecryptionError extends Error {
  constructor(message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.name = 'PayloadDecryptionError';
  }
}

export interface CodecKey {
  id: string;
  key: Buffer;
}

/** Parses one key; `variable` names where it came from, for the error message. */
export function parseCodecKey(text: string, variable = CODEC_KEY_ENV): CodecKey {
  const value = text.trim();
  let key: Buffer | undefined;
  if (/^[0-9a-fA-F]{64}$/.test(value)) key = Buffer.from(value, 'hex');
  // Node's base64 decoder reads the URL-safe alphabet too.
  else if (/^[A-Za-z0-9+/_-]{43}=?$/.test(value)) key = Buffer.from(value, 'base64');
  if (key?.length !== 32) throw new CodecKeyError(`${variable} must be ${KEY_FORMAT}; the value given is not (${value.length} characters)`);
  return { id: keyId(key), key };
}

/** A stable, non-reversible name for a key: lets a reader pick the right key after a rotation. */
function keyId(key: Buffer): string {
  return `sha256:${createHash('sha256').update('ferry payload codec key\0').update(key).digest('hex').slice(0, 16)}`;
}

const text = (bytes: Uint8Array | null | undefined) => (bytes ? Buffer.from(bytes).toString('utf8') : undefined);

export class AesGcmCodec implements PayloadCodec {
  private readonly keys = new Map<string, Buffer>();

  /** `current` seals new payloads; without it the codec only opens payloads (encryption off). */
  constructor(
    private readonly current: CodecKey | undefined,
    previous: CodecKey[] = [],
  ) {
    for (const k of [...previous, ...(current ? [current] : [])]) this.keys.set(k.id, k.key);
  }

  get keyId(): string | undefined {
    return this.current?.id;
  }

  async encode(payloads: Payload[]): Promise<Payload[]> {
    const current = this.current;
    if (!current) return payloads;
    return payloads.map((payload) => {
      const iv = randomBytes(IV_BYTES);
      const cipher = createCipheriv('aes-256-gcm', current.key, iv);
      // The key id is authenticated too: a ciphertext cannot be relabelled to another key.
      cipher.setAAD(Buffer.from(current.id));
      const plain = temporal.api.common.v1.Payload.encode(payload).finish();
      const sealed = Buffer.concat([iv, cipher.update(plain), cipher.final(), cipher.getAuthTag()]);
      return {
        metadata: { encoding: Buffer.from(ENCRYPTED_ENCODING), [KEY_ID_METADATA]: Buffer.from(current.id) },
        data: sealed,
      };
    });
  }

  /** Opens encrypted payloads; leaves the others untouched (histories from before the key). */
  async decode(payloads: Payload[]): Promise<Payload[]> {
    return payloads.map((payload) => (text(payload.metadata?.encoding) === ENCRYPTED_ENCODING ? this.open(payload) : payload));
  }

  private open(payload: Payload): Payload {
    const id = text(payload.metadata?.[KEY_ID_METADATA]);
    if (!id) throw new PayloadDecryptionError(`an encrypted payload has no ${KEY_ID_METADATA}; it was not written by Ferry's codec`);
    const key = this.keys.get(id);
    if (!key) {
      throw new PayloadDecryptionError(
        this.keys.size === 0
          ? `payload was encrypted with key ${id} and ${CODEC_KEY_ENV} is not set: set ${CODEC_KEY_ENV} to the workers' key to read it`
          : `payload was encrypted with key ${id}, which this process does not hold (${CODEC_KEY_ENV} is ${this.current?.id ?? 'not set'}); ` +
              `set ${CODEC_KEY_ENV}, or list the old key in ${CODEC_PREVIOUS_KEYS_ENV} after a rotation`,
      );
    }
    const data = Buffer.from(payload.data ?? new Uint8Array());
    if (data.length < IV_BYTES + TAG_BYTES) throw new PayloadDecryptionError(`encrypted payload (key ${id}) is truncated: ${data.length} bytes`);
    try {
      const decipher = createDecipheriv('aes-256-gcm', key, data.subarray(0, IV_BYTES));
      decipher.setAAD(Buffer.from(id));
      decipher.setAuthTag(data.subarray(data.length - TAG_BYTES));
      const plain = Buffer.concat([decipher.update(data.subarray(IV_BYTES, data.length - TAG_BYTES)), decipher.final()]);
      const { metadata, data: inner } = temporal.api.common.v1.Payload.decode(plain);
      return { metadata, data: inner };
    } catch (err) {
      throw new PayloadDecryptionError(`encrypted payload (key ${id}) failed authentication: it was altered, or the key is wrong`, { cause: err });
    }
  }
}

/** What LenientCodec puts in place of a payload it cannot open: `{ [UNREADABLE]: why }`. */
export const UNREADABLE = 'ferryUnreadable';

/**
 * Opens what it can, and turns an encrypted payload it cannot open (no key, another key) into a
 * JSON marker that says why, instead of failing the whole call: a listing of many migrations
 * still shows the rows it can read. Only for reading; never given to a worker.
 */
export class LenientCodec implements PayloadCodec {
  constructor(private readonly inner: PayloadCodec | undefined) {}

  async encode(payloads: Payload[]): Promise<Payload[]> {
    return payloads;
  }

  async decode(payloads: Payload[]): Promise<Payload[]> {
    return Promise.all(
      payloads.map(async (payload) => {
        if (text(payload.metadata?.encoding) !== ENCRYPTED_ENCODING) return payload;
        try {
          if (!this.inner) throw new PayloadDecryptionError(`payload is encrypted and ${CODEC_KEY_ENV} is not set: set ${CODEC_KEY_ENV} to the workers' key to read it`);
          return (await this.inner.decode([payload]))[0];
        } catch (err) {
          const marker = { [UNREADABLE]: (err as Error).message };
          return { metadata: { encoding: Buffer.from('json/plain') }, data: Buffer.from(JSON.stringify(marker)) };
        }
      }),
    );
  }
}

/** The codec configured by the environment, or undefined when encryption is not configured. */
export function codecFromEnv(env: NodeJS.ProcessEnv = process.env): AesGcmCodec | undefined {
  const current = env[CODEC_KEY_ENV]?.trim() ? parseCodecKey(env[CODEC_KEY_ENV] as string) : undefined;
  const previous = (env[CODEC_PREVIOUS_KEYS_ENV] ?? '')
    .split(',')
    .filter((k) => k.trim())
    .map((k, i) => parseCodecKey(k, `${CODEC_PREVIOUS_KEYS_ENV} (entry ${i + 1})`));
  if (!current && previous.length === 0) return undefined;
  return new AesGcmCodec(current, previous);
}

/**
 * What FerryClient and createFerryWorker pass to Temporal: both must hold the same keys. Failure
 * messages and stack traces become payloads too, so they are encrypted like the rest.
 */
export function dataConverterFromEnv(env: NodeJS.ProcessEnv = process.env): DataConverter | undefined {
  const codec = codecFromEnv(env);
  return codec ? { payloadCodecs: [codec], failureConverterPath: require.resolve('./failure-converter') } : undefined;
}

/**
 * A client's converter: the workers' one when a key is set; without a key, a codec holding no key
 * that leaves plain payloads alone and answers an encrypted one with which variable to set (the
 * SDK alone says only `Unknown encoding: binary/encrypted`).
 */
export function clientDataConverterFromEnv(env: NodeJS.ProcessEnv = process.env): DataConverter {
  return dataConverterFromEnv(env) ?? { payloadCodecs: [new AesGcmCodec(undefined)] };
}

