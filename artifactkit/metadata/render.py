"""Values a person can read in a mismatch: an ACL as ``u:1234:rw-``, a capability as ``cap_net_raw+ep``,
flags as ``chattr`` letters, holes as data runs. Bytes that are none of these are shown as bytes."""

from __future__ import annotations

import struct
from typing import Final

from artifactkit.metadata.flags import flag_letters
from artifactkit.metadata.model import Extents

ACL_NAMES: Final = ("system.posix_acl_access", "system.posix_acl_default")
CAPABILITY_NAME: Final = "security.capability"

# include/uapi/linux/posix_acl.h and posix_acl_xattr.h: a u32 version (2), then (u16 tag, u16 perm, u32 id).
_ACL_HEAD: Final = struct.Struct("<I")
_ACL_ENTRY: Final = struct.Struct("<HHI")
_ACL_TAGS: Final = {0x01: "u", 0x02: "u", 0x04: "g", 0x08: "g", 0x10: "m", 0x20: "o"}
_NAMED_TAGS: Final = frozenset({0x02, 0x08})

# include/uapi/linux/capability.h, in bit order.
_CAPS: Final = (
    "chown", "dac_override", "dac_read_search", "fowner", "fsetid", "kill", "setgid", "setuid", "setpcap",
    "linux_immutable", "net_bind_service", "net_broadcast", "net_admin", "net_raw", "ipc_lock", "ipc_owner",
    "sys_module", "sys_rawio", "sys_chroot", "sys_ptrace", "sys_pacct", "sys_admin", "sys_boot", "sys_nice",
    "sys_resource", "sys_time", "sys_tty_config", "mknod", "lease", "audit_write", "audit_control", "setfcap",
    "mac_override", "mac_admin", "syslog", "wake_alarm", "block_suspend", "audit_read", "perfmon", "bpf",
    "checkpoint_restore",
)
_VFS_CAP_FLAGS_EFFECTIVE: Final = 0x000001


def acl_text(value: bytes) -> str | None:
    """``u::rw-,u:1234:rw-,g::r--,m::rw-,o::---`` for a POSIX ACL xattr, or ``None`` if it is not one."""
    if len(value) < _ACL_HEAD.size or (len(value) - _ACL_HEAD.size) % _ACL_ENTRY.size:
        return None
    if _ACL_HEAD.unpack_from(value)[0] != 2:
        return None
    parts = []
    for offset in range(_ACL_HEAD.size, len(value), _ACL_ENTRY.size):
        tag, perm, ident = _ACL_ENTRY.unpack_from(value, offset)
        if tag not in _ACL_TAGS:
            return None
        who = str(ident) if tag in _NAMED_TAGS else ""
        rwx = "".join(c if perm & bit else "-" for c, bit in (("r", 4), ("w", 2), ("x", 1)))
        parts.append(f"{_ACL_TAGS[tag]}:{who}:{rwx}")
    return ",".join(parts)


def acl_bytes(text: str) -> bytes:
    """The xattr value of an ACL written as :func:`acl_text` shows it (``u::rw-,u:1234:r--,...``)."""
    tags = {("u", False): 0x01, ("u", True): 0x02, ("g", False): 0x04, ("g", True): 0x08,
            ("m", False): 0x10, ("o", False): 0x20}
    out = bytearray(_ACL_HEAD.pack(2))
    for part in text.split(","):
        kind, who, rwx = part.split(":")
        perm = sum(bit for c, bit in (("r", 4), ("w", 2), ("x", 1)) if c in rwx)
        out += _ACL_ENTRY.pack(tags[(kind, bool(who))], perm, int(who) if who else 0xFFFFFFFF)
    return bytes(out)


def capability_text(value: bytes) -> str | None:
    """``cap_net_raw+ep`` for a ``security.capability`` value (v2 or v3), or ``None`` if it is not one."""
    if len(value) < 20:
        return None
    magic, perm_lo, inh_lo, perm_hi, inh_hi = struct.unpack_from("<IIIII", value)
    permitted, inheritable = perm_lo | perm_hi << 32, inh_lo | inh_hi << 32
    effective = "e" if magic & _VFS_CAP_FLAGS_EFFECTIVE else ""
    parts = []
    for bit, name in enumerate(_CAPS):
        mask = 1 << bit
        letters = effective * bool(permitted & mask) + "p" * bool(permitted & mask) + "i" * bool(inheritable & mask)
        if letters:
            parts.append(f"cap_{name}+{''.join(sorted(letters))}")
    return ",".join(parts) or "(none)"


def xattr_text(name: str, value: bytes | None) -> str:
    """A readable form of one xattr value (``None`` for an absent one)."""
    if value is None:
        return "(absent)"
    readable = (acl_text(value) if name in ACL_NAMES else capability_text(value) if name == CAPABILITY_NAME
                else None)
    if readable is not None:
        return readable
    return repr(value) if len(value) <= 64 else f"{value[:64]!r}... ({len(value)} bytes)"


def flags_text(value: int | None) -> str:
    """``chattr`` letters, with the raw number for bits that have none."""
    return "(none recorded)" if value is None else f"{flag_letters(value)} ({value:#x})"


def extents_text(extents: Extents | None, size: int) -> str:
    """How much of a file is data and how much hole, in bytes: ``dense: 4096 of 4096 bytes data, no hole``
    or ``8192 of 8388608 bytes data in 2 run(s), 8380416 in holes``."""
    if extents is None:
        return f"dense: {size} of {size} bytes data, no hole"
    data = sum(length for _, length in extents)
    return f"{data} of {size} bytes data in {len(extents)} run(s), {size - data} in holes"
