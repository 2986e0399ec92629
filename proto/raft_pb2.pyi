from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class MembershipChange(_message.Message):
    __slots__ = ("op", "addr")
    class Op(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = ()
        OP_UNSPECIFIED: _ClassVar[MembershipChange.Op]
        ADD: _ClassVar[MembershipChange.Op]
        REMOVE: _ClassVar[MembershipChange.Op]
        ADD_LEARNER: _ClassVar[MembershipChange.Op]
        PROMOTE: _ClassVar[MembershipChange.Op]
    OP_UNSPECIFIED: MembershipChange.Op
    ADD: MembershipChange.Op
    REMOVE: MembershipChange.Op
    ADD_LEARNER: MembershipChange.Op
    PROMOTE: MembershipChange.Op
    OP_FIELD_NUMBER: _ClassVar[int]
    ADDR_FIELD_NUMBER: _ClassVar[int]
    op: MembershipChange.Op
    addr: str
    def __init__(self, op: _Optional[_Union[MembershipChange.Op, str]] = ..., addr: _Optional[str] = ...) -> None: ...
