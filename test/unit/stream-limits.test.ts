import { ConfigError } from '../../src/core/errors';
import { streamLimits } from '../../src/core/stream-limits';

describe('the event streams\' limits from the environment', () => {
  it('keeps events 7 days, without other limits, on one replica when nothing is set', () => {
    expect(streamLimits({})).toEqual({ maxAgeMs: 7 * 86_400_000, maxBytes: -1, maxMessages: -1, replicas: 1, given: [] });
  });

  it('reads each limit that is set, sizes in binary units, and says which were set', () => {
    const limits = streamLimits({ FERRY_EVENTS_MAX_AGE: '12h', FERRY_EVENTS_MAX_BYTES: '10G', FERRY_EVENTS_MAX_MESSAGES: '500000', FERRY_EVENTS_REPLICAS: '3' });
    expect(limits).toEqual({ maxAgeMs: 12 * 3_600_000, maxBytes: 10 * 1024 ** 3, maxMessages: 500_000, replicas: 3, given: ['maxAgeMs', 'maxBytes', 'maxMessages', 'replicas'] });
    expect(streamLimits({ FERRY_EVENTS_MAX_BYTES: '1048576' }).maxBytes).toBe(1_048_576);
    expect(streamLimits({ FERRY_EVENTS_MAX_BYTES: '512MiB' }).maxBytes).toBe(512 * 1024 ** 2);
  });

  it.each([
    ['FERRY_EVENTS_MAX_AGE', 'a week', 'FERRY_EVENTS_MAX_AGE=a week: not a duration'],
    ['FERRY_EVENTS_MAX_BYTES', '10 gigs', 'FERRY_EVENTS_MAX_BYTES=10 gigs: not a size'],
    ['FERRY_EVENTS_MAX_BYTES', '0', 'FERRY_EVENTS_MAX_BYTES=0: not a size'],
    ['FERRY_EVENTS_MAX_MESSAGES', '-1', 'FERRY_EVENTS_MAX_MESSAGES=-1: not a whole number'],
    ['FERRY_EVENTS_REPLICAS', '7', 'FERRY_EVENTS_REPLICAS=7: JetStream keeps 1 to 5 replicas'],
  ])('refuses %s=%s, naming the variable and what to write', (name, value, message) => {
    expect(() => streamLimits({ [name]: value })).toThrow(ConfigError);
    expect(() => streamLimits({ [name]: value })).toThrow(message);
  });
});
