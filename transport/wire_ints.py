"""Integers too wide for their field, found in a request's bytes before the parser narrows them.

A varint on the wire has no width: protobuf parses 2**40 sent for an ``int32`` field as its low
32 bits (0), so ``partition = 2**40`` would reach the broker as partition 0 and be accepted.
This module keeps a *wide twin* of every message of proto/api.proto (and the files it imports):
the same field numbers with every ``int32``/``sint32``/``uint32``/enum field widened to 64 bits
and every field that cannot hold such an integer (strings, bytes, messages without one) left
out. ``out_of_range(message_class, data)`` parses the bytes into the twin and names the first
value outside its declared type's range (enums: the int32 range), else returns None.

The twins are built from the generated descriptors at import, so a field added to the proto is
covered without touching this file. Unknown message types (not from api.proto) are not checked.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from google.protobuf import descriptor, descriptor_pb2, descriptor_pool, message_factory

from raftq.proto import api_pb2

_F = descriptor_pb2.FieldDescriptorProto
# declared type -> (the 64-bit type it is parsed as, low, high)
_NARROW: dict[int, tuple[int, int, int]] = {
    _F.TYPE_INT32: (_F.TYPE_INT64, -(2**31), 2**31 - 1),
    _F.TYPE_SINT32: (_F.TYPE_SINT64, -(2**31), 2**31 - 1),
    _F.TYPE_UINT32: (_F.TYPE_UINT64, 0, 2**32 - 1),
    _F.TYPE_ENUM: (_F.TYPE_INT64, -(2**31), 2**31 - 1),
}
_WIDE_PREFIX = "raftq_wide."

Check = Callable[[Any, str], str | None]  # (wide message, path) -> a problem or None


def _files(root: descriptor.FileDescriptor) -> list[descriptor.FileDescriptor]:
    """``root`` and every file it imports, dependencies first."""
    seen: dict[str, descriptor.FileDescriptor] = {}

    def visit(f: descriptor.FileDescriptor) -> None:
        if f.name in seen:
            return
        for dep in f.dependencies:
            visit(dep)
        seen[f.name] = f

    visit(root)
    return list(seen.values())


def _narrow_messages(files: Iterable[descriptor.FileDescriptor]) -> set[str]:
    """Full names of the messages that hold a narrow integer, directly or in a submessage."""
    messages: dict[str, descriptor.Descriptor] = {}

    def collect(d: descriptor.Descriptor) -> None:
        messages[d.full_name] = d
        for nested in d.nested_types:
            collect(nested)

    for f in files:
        for d in f.message_types_by_name.values():
            collect(d)
    narrow: set[str] = set()
    changed = True
    while changed:
        changed = False
        for name, d in messages.items():
            if name in narrow:
                continue
            for field in d.fields:
                sub = field.message_type.full_name if field.message_type is not None else None
                if field.type in _NARROW or sub in narrow:
                    narrow.add(name)
                    changed = True
                    break
    return narrow


def _widen(fd: descriptor_pb2.FileDescriptorProto, narrow: set[str]) -> None:
    package = fd.package

    def message(m: descriptor_pb2.DescriptorProto, scope: str) -> None:
        full = f"{scope}.{m.name}"
        kept = []
        for field in m.field:
            target = field.type_name.lstrip(".")
            if field.type in _NARROW:
                field.type = descriptor_pb2.FieldDescriptorProto.Type.ValueType(
                    _NARROW[field.type][0]
                )
                field.ClearField("type_name")
            elif not (field.type == _F.TYPE_MESSAGE and target in narrow):
                continue  # nothing narrow inside: skipped as an unknown field
            else:
                field.type_name = "." + _WIDE_PREFIX + target
            kept.append(field)
        # oneofs (proto3 optional ones too) keep only those a kept field is in, renumbered
        used = sorted({f.oneof_index for f in kept if f.HasField("oneof_index")})
        oneofs = [m.oneof_decl[i] for i in used]
        for field in kept:
            if field.HasField("oneof_index"):
                field.oneof_index = used.index(field.oneof_index)
        del m.field[:]
        m.field.extend(kept)
        del m.oneof_decl[:]
        m.oneof_decl.extend(oneofs)
        maps = [n for n in m.nested_type if n.options.map_entry]  # their fields were dropped
        for entry in maps:
            m.nested_type.remove(entry)
        for nested in m.nested_type:
            message(nested, full)

    for m in fd.message_type:
        message(m, package)
    fd.name = _WIDE_PREFIX + fd.name
    fd.package = _WIDE_PREFIX + package
    deps = [_WIDE_PREFIX + d for d in fd.dependency]
    del fd.dependency[:]
    fd.dependency.extend(deps)
    del fd.service[:]
    del fd.enum_type[:]  # enum fields are plain int64 in the twin


def _build(root: descriptor.FileDescriptor) -> dict[str, tuple[type[Any], Check]]:
    files = _files(root)
    narrow = _narrow_messages(files)
    pool = descriptor_pool.DescriptorPool()
    for f in files:
        fd = descriptor_pb2.FileDescriptorProto()
        f.CopyToProto(fd)
        _widen(fd, narrow)
        pool.Add(fd)
    twins: dict[str, tuple[type[Any], Check]] = {}
    checks: dict[str, Check] = {}
    # messages whose only narrow fields are singular scalars (Record: priority): a repeated
    # field of them is checked a column at a time, without a call per element
    flat: dict[str, list[tuple[str, int, int]]] = {}

    def in_range(items: Any, scalars: list[tuple[str, int, int]]) -> bool:
        for name, low, high in scalars:
            values = [getattr(item, name) for item in items]
            if values and (min(values) < low or max(values) > high):
                return False
        return True

    def check_for(wide: descriptor.Descriptor, original: descriptor.Descriptor) -> Check:
        name = original.full_name
        if name in checks:
            return checks[name]
        # (field, repeated, (low, high) or the submessage's Check, the submessage's name)
        steps: list[tuple[str, bool, Any, str]] = []

        def run(msg: Any, path: str) -> str | None:
            for field, repeated, how, sub_name in steps:
                if isinstance(how, tuple):
                    low, high = how
                    values = getattr(msg, field) if repeated else (getattr(msg, field),)
                    for value in values:
                        if not low <= value <= high:
                            return f"{path}{field} is {value}; it must be {low}..{high}"
                elif repeated:
                    items = getattr(msg, field)
                    if sub_name in flat and in_range(items, flat[sub_name]):
                        continue
                    for i, sub in enumerate(items):
                        if (problem := how(sub, f"{path}{field}[{i}].")) is not None:
                            return problem
                elif msg.HasField(field):
                    problem = how(getattr(msg, field), f"{path}{field}.")
                    if problem is not None:
                        return problem
            return None

        checks[name] = run
        for field in original.fields:
            if field.name not in wide.fields_by_name:
                continue
            repeated = field.is_repeated
            entry = field.message_type
            if entry is not None and entry.GetOptions().map_entry:
                raise NotImplementedError(f"{field.full_name}: a map holding a narrow integer")
            if field.type in _NARROW:
                steps.append((field.name, repeated, _NARROW[field.type][1:], ""))
            else:
                sub_wide = wide.fields_by_name[field.name].message_type
                assert sub_wide is not None and entry is not None  # a message holding one
                sub = check_for(sub_wide, entry)
                steps.append((field.name, repeated, sub, entry.full_name))
        if all(isinstance(how, tuple) and not repeated for _, repeated, how, _ in steps):
            flat[name] = [(field, how[0], how[1]) for field, _, how, _ in steps]
        return run

    for f in files:
        for d in f.message_types_by_name.values():
            if d.full_name not in narrow:
                continue
            wide = pool.FindMessageTypeByName(_WIDE_PREFIX + d.full_name)
            twins[d.full_name] = (message_factory.GetMessageClass(wide), check_for(wide, d))
    return twins


_TWINS = _build(api_pb2.DESCRIPTOR)


def out_of_range(message_class: type[Any], data: bytes) -> str | None:
    """What is out of range in ``data``, a serialized ``message_class`` that parsed, or None.
    Only api.proto's messages (and those they import) are checked."""
    twin = _TWINS.get(getattr(getattr(message_class, "DESCRIPTOR", None), "full_name", ""))
    if twin is None:
        return None
    wide_class, check = twin
    return check(wide_class.FromString(data), "")


__all__ = ["out_of_range"]
