#!/usr/bin/env python3
"""old_tenant_id.py KEY... - the tenant id each API key had before --tenant-secret-file.

Gateways before the deployment secret derived a key's tenant as 32 hex
digits of SipHash-2-4 of the key under two fixed keys ("smollm3 tenant 1",
"smollm3 tenant 2").  A key file line `KEY NAME tenant=<that id>` keeps the
sessions and cached prefixes that tenant left in kv_spill_dir after the
upgrade (gateway/README.md#tenants, Migrating).  Prints "ID" per key, one a
line; --self-test checks the SipHash against the reference vector.
"""
import struct
import sys

MASK = (1 << 64) - 1


def _rotl(x, b):
    return ((x << b) | (x >> (64 - b))) & MASK


def siphash24(key, data):
    k0, k1 = struct.unpack("<QQ", key)
    v0, v1 = k0 ^ 0x736F6D6570736575, k1 ^ 0x646F72616E646F6D
    v2, v3 = k0 ^ 0x6C7967656E657261, k1 ^ 0x7465646279746573

    def rounds(n):
        nonlocal v0, v1, v2, v3
        for _ in range(n):
            v0 = (v0 + v1) & MASK; v1 = _rotl(v1, 13); v1 ^= v0; v0 = _rotl(v0, 32)  # noqa: E702
            v2 = (v2 + v3) & MASK; v3 = _rotl(v3, 16); v3 ^= v2                      # noqa: E702
            v0 = (v0 + v3) & MASK; v3 = _rotl(v3, 21); v3 ^= v0                      # noqa: E702
            v2 = (v2 + v1) & MASK; v1 = _rotl(v1, 17); v1 ^= v2; v2 = _rotl(v2, 32)  # noqa: E702
    full = len(data) - len(data) % 8
    for i in range(0, full, 8):
        m = struct.unpack("<Q", data[i:i + 8])[0]
        v3 ^= m
        rounds(2)
        v0 ^= m
    b = (len(data) & 0xFF) << 56
    for i, c in enumerate(data[full:]):
        b |= c << (8 * i)
    v3 ^= b
    rounds(2)
    v0 ^= b
    v2 ^= 0xFF
    rounds(4)
    return v0 ^ v1 ^ v2 ^ v3


def old_tenant_id(key):
    k = key.encode()
    return "%016x%016x" % (siphash24(b"smollm3 tenant 1", k), siphash24(b"smollm3 tenant 2", k))


def main(argv):
    if argv[1:] == ["--self-test"]:
        ok = siphash24(bytes(range(16)), bytes(range(15))) == 0xA129CA6149BE45E5
        print("siphash24 reference vector: %s" % ("ok" if ok else "WRONG"))
        return 0 if ok else 1
    if len(argv) < 2:
        print(__doc__.strip(), file=sys.stderr)
        return 2
    for key in argv[1:]:
        print(old_tenant_id(key))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
