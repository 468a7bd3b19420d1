/**
 * Which addresses a callback may not reach unless the workers allow it (issue 12): loopback,
 * link-local, private, shared (CGNAT) and unspecified ones, in every spelling an IPv6 address can
 * give them.
 */
import { isPrivateAddress } from '../../src/private-address';

describe('private callback addresses', () => {
  it.each([
    '127.0.0.1',
    '127.255.255.254',
    '10.0.0.0',
    '10.255.255.255',
    '172.16.0.0',
    '172.31.255.255',
    '192.168.0.1',
    '100.64.0.0',
    '100.127.255.255',
    '169.254.0.1',
    '169.254.169.254',
    '0.0.0.0',
    '0.1.2.3',
    '::1',
    '::',
    '0:0:0:0:0:0:0:1',
    'fc00::1',
    'fdff:ffff::1',
    'fe80::1',
    'FE80::1',
    'febf:ffff::1',
    'fe80::1%eth0',
    '::ffff:127.0.0.1',
    '::ffff:7f00:1',
    '::ffff:10.0.0.1',
    '::ffff:a9fe:a9fe',
    '0:0:0:0:0:ffff:c0a8:0101',
    // No HTTP server answers there for a callback: deprecated site-local, multicast, reserved, broadcast.
    'fec0::1',
    'ff02::1',
    '224.0.0.1',
    '240.0.0.1',
    '255.255.255.255',
    // Fail closed on anything that is not an address at all.
    'not an address',
  ])('refuses %s', (address) => {
    expect(isPrivateAddress(address)).toBe(true);
  });

  it.each([
    '8.8.8.8',
    '1.1.1.1',
    '11.0.0.1',
    '100.63.255.255',
    '100.128.0.0',
    '172.15.255.255',
    '172.32.0.0',
    '169.253.255.255',
    '169.255.0.1',
    '192.169.0.1',
    '2606:4700:4700::1111',
    '2a00:1450:4001::200e',
    '::ffff:8.8.8.8',
    '::ffff:808:808',
  ])('allows the public address %s', (address) => {
    expect(isPrivateAddress(address)).toBe(false);
  });
});
