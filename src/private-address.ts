/**
 * Addresses a callback must not reach unless the workers allow it: loopback, link-local (cloud
 * metadata services live at 169.254.169.254), private, shared (CGNAT), unspecified, multicast and
 * reserved ones. Workers sit inside the network; a callback URL comes from whoever may start a
 * migration. IPv6 spellings of IPv4 addresses (::ffff:127.0.0.1, ::ffff:7f00:1) are judged by the
 * IPv4 address they stand for.
 */
import { BlockList, isIPv4, isIPv6 } from 'node:net';

const refused = new BlockList();
const IPV4: [string, number][] = [
  ['0.0.0.0', 8], // "this network"; 0.0.0.0 reaches the local host
  ['10.0.0.0', 8],
  ['100.64.0.0', 10], // shared address space (carrier-grade NAT)
  ['127.0.0.0', 8],
  ['169.254.0.0', 16],
  ['172.16.0.0', 12],
  ['192.168.0.0', 16],
  ['224.0.0.0', 4], // multicast
  ['240.0.0.0', 4], // reserved, and the broadcast address
];
const IPV6: [string, number][] = [
  ['::', 128],
  ['::1', 128],
  ['fc00::', 7], // unique local
  ['fe80::', 10], // link-local
  ['fec0::', 10], // site-local (deprecated, still routed by some networks)
  ['ff00::', 8], // multicast
];
for (const [network, prefix] of IPV4) refused.addSubnet(network, prefix, 'ipv4');
for (const [network, prefix] of IPV6) refused.addSubnet(network, prefix, 'ipv6');

/** The IPv4 address inside a mapped (::ffff:a.b.c.d), compatible (::a.b.c.d) or NAT64 (64:ff9b::a.b.c.d) IPv6 address. */
function embeddedIPv4(canonical: string): string | undefined {
  const m = /^(?:::ffff:|::|64:ff9b::)([0-9a-f]{1,4}):([0-9a-f]{1,4})$/.exec(canonical);
  if (!m) return undefined;
  const high = parseInt(m[1], 16);
  const low = parseInt(m[2], 16);
  return [high >> 8, high & 255, low >> 8, low & 255].join('.');
}

/** True for every address a callback may reach only with FERRY_CALLBACK_ALLOW_PRIVATE=true; anything that is not an address counts as one. */
export function isPrivateAddress(address: string): boolean {
  const bare = address.replace(/%.*$/, ''); // a zone index (fe80::1%eth0) says nothing about the range
  if (isIPv4(bare)) return refused.check(bare, 'ipv4');
  if (!isIPv6(bare)) return true;
  // The URL parser writes every spelling of an IPv6 address the same way: lower case, compressed, hex.
  const canonical = new URL(`http://[${bare}]/`).hostname.slice(1, -1);
  const v4 = embeddedIPv4(canonical);
  return v4 !== undefined ? refused.check(v4, 'ipv4') : refused.check(canonical, 'ipv6');
}
