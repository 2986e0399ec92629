from raftq.proto import common_pb2 as _common_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class MetaCommand(_message.Message):
    __slots__ = ("now_ms", "register_broker", "deregister_broker", "create_topic", "delete_topic", "alter_topic_config", "reassign_partition", "join_group", "leave_group", "delete_group", "commit_txn", "expire_txns", "add_partitions", "restore_table")
    NOW_MS_FIELD_NUMBER: _ClassVar[int]
    REGISTER_BROKER_FIELD_NUMBER: _ClassVar[int]
    DEREGISTER_BROKER_FIELD_NUMBER: _ClassVar[int]
    CREATE_TOPIC_FIELD_NUMBER: _ClassVar[int]
    DELETE_TOPIC_FIELD_NUMBER: _ClassVar[int]
    ALTER_TOPIC_CONFIG_FIELD_NUMBER: _ClassVar[int]
    REASSIGN_PARTITION_FIELD_NUMBER: _ClassVar[int]
    JOIN_GROUP_FIELD_NUMBER: _ClassVar[int]
    LEAVE_GROUP_FIELD_NUMBER: _ClassVar[int]
    DELETE_GROUP_FIELD_NUMBER: _ClassVar[int]
    COMMIT_TXN_FIELD_NUMBER: _ClassVar[int]
    EXPIRE_TXNS_FIELD_NUMBER: _ClassVar[int]
    ADD_PARTITIONS_FIELD_NUMBER: _ClassVar[int]
    RESTORE_TABLE_FIELD_NUMBER: _ClassVar[int]
    now_ms: int
    register_broker: RegisterBroker
    deregister_broker: DeregisterBroker
    create_topic: CreateTopic
    delete_topic: DeleteTopic
    alter_topic_config: AlterTopicConfig
    reassign_partition: ReassignPartition
    join_group: JoinGroup
    leave_group: LeaveGroup
    delete_group: DeleteGroup
    commit_txn: CommitTxn
    expire_txns: ExpireTxns
    add_partitions: AddPartitions
    restore_table: RestoreTable
    def __init__(self, now_ms: _Optional[int] = ..., register_broker: _Optional[_Union[RegisterBroker, _Mapping]] = ..., deregister_broker: _Optional[_Union[DeregisterBroker, _Mapping]] = ..., create_topic: _Optional[_Union[CreateTopic, _Mapping]] = ..., delete_topic: _Optional[_Union[DeleteTopic, _Mapping]] = ..., alter_topic_config: _Optional[_Union[AlterTopicConfig, _Mapping]] = ..., reassign_partition: _Optional[_Union[ReassignPartition, _Mapping]] = ..., join_group: _Optional[_Union[JoinGroup, _Mapping]] = ..., leave_group: _Optional[_Union[LeaveGroup, _Mapping]] = ..., delete_group: _Optional[_Union[DeleteGroup, _Mapping]] = ..., commit_txn: _Optional[_Union[CommitTxn, _Mapping]] = ..., expire_txns: _Optional[_Union[ExpireTxns, _Mapping]] = ..., add_partitions: _Optional[_Union[AddPartitions, _Mapping]] = ..., restore_table: _Optional[_Union[RestoreTable, _Mapping]] = ...) -> None: ...

class RegisterBroker(_message.Message):
    __slots__ = ("broker_id", "client_addr", "raft_addr", "rack")
    BROKER_ID_FIELD_NUMBER: _ClassVar[int]
    CLIENT_ADDR_FIELD_NUMBER: _ClassVar[int]
    RAFT_ADDR_FIELD_NUMBER: _ClassVar[int]
    RACK_FIELD_NUMBER: _ClassVar[int]
    broker_id: int
    client_addr: str
    raft_addr: str
    rack: str
    def __init__(self, broker_id: _Optional[int] = ..., client_addr: _Optional[str] = ..., raft_addr: _Optional[str] = ..., rack: _Optional[str] = ...) -> None: ...

class DeregisterBroker(_message.Message):
    __slots__ = ("broker_id", "moves")
    BROKER_ID_FIELD_NUMBER: _ClassVar[int]
    MOVES_FIELD_NUMBER: _ClassVar[int]
    broker_id: int
    moves: _containers.RepeatedCompositeFieldContainer[ReassignPartition]
    def __init__(self, broker_id: _Optional[int] = ..., moves: _Optional[_Iterable[_Union[ReassignPartition, _Mapping]]] = ...) -> None: ...

class CreateTopic(_message.Message):
    __slots__ = ("name", "topic_id", "config", "replication_factor", "replicas")
    NAME_FIELD_NUMBER: _ClassVar[int]
    TOPIC_ID_FIELD_NUMBER: _ClassVar[int]
    CONFIG_FIELD_NUMBER: _ClassVar[int]
    REPLICATION_FACTOR_FIELD_NUMBER: _ClassVar[int]
    REPLICAS_FIELD_NUMBER: _ClassVar[int]
    name: str
    topic_id: int
    config: _common_pb2.TopicConfig
    replication_factor: int
    replicas: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, name: _Optional[str] = ..., topic_id: _Optional[int] = ..., config: _Optional[_Union[_common_pb2.TopicConfig, _Mapping]] = ..., replication_factor: _Optional[int] = ..., replicas: _Optional[_Iterable[int]] = ...) -> None: ...

class AddPartitions(_message.Message):
    __slots__ = ("name", "topic_id", "replication_factor", "replicas")
    NAME_FIELD_NUMBER: _ClassVar[int]
    TOPIC_ID_FIELD_NUMBER: _ClassVar[int]
    REPLICATION_FACTOR_FIELD_NUMBER: _ClassVar[int]
    REPLICAS_FIELD_NUMBER: _ClassVar[int]
    name: str
    topic_id: int
    replication_factor: int
    replicas: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, name: _Optional[str] = ..., topic_id: _Optional[int] = ..., replication_factor: _Optional[int] = ..., replicas: _Optional[_Iterable[int]] = ...) -> None: ...

class DeleteTopic(_message.Message):
    __slots__ = ("name", "topic_id")
    NAME_FIELD_NUMBER: _ClassVar[int]
    TOPIC_ID_FIELD_NUMBER: _ClassVar[int]
    name: str
    topic_id: int
    def __init__(self, name: _Optional[str] = ..., topic_id: _Optional[int] = ...) -> None: ...

class AlterTopicConfig(_message.Message):
    __slots__ = ("name", "topic_id", "config")
    NAME_FIELD_NUMBER: _ClassVar[int]
    TOPIC_ID_FIELD_NUMBER: _ClassVar[int]
    CONFIG_FIELD_NUMBER: _ClassVar[int]
    name: str
    topic_id: int
    config: _common_pb2.TopicConfig
    def __init__(self, name: _Optional[str] = ..., topic_id: _Optional[int] = ..., config: _Optional[_Union[_common_pb2.TopicConfig, _Mapping]] = ...) -> None: ...

class ReassignPartition(_message.Message):
    __slots__ = ("topic", "partition", "replicas", "topic_id")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    REPLICAS_FIELD_NUMBER: _ClassVar[int]
    TOPIC_ID_FIELD_NUMBER: _ClassVar[int]
    topic: str
    partition: int
    replicas: _containers.RepeatedScalarFieldContainer[int]
    topic_id: int
    def __init__(self, topic: _Optional[str] = ..., partition: _Optional[int] = ..., replicas: _Optional[_Iterable[int]] = ..., topic_id: _Optional[int] = ...) -> None: ...

class JoinGroup(_message.Message):
    __slots__ = ("group", "member_id", "topics", "session_timeout_ms", "client_id", "client_host", "start_from", "principal")
    GROUP_FIELD_NUMBER: _ClassVar[int]
    MEMBER_ID_FIELD_NUMBER: _ClassVar[int]
    TOPICS_FIELD_NUMBER: _ClassVar[int]
    SESSION_TIMEOUT_MS_FIELD_NUMBER: _ClassVar[int]
    CLIENT_ID_FIELD_NUMBER: _ClassVar[int]
    CLIENT_HOST_FIELD_NUMBER: _ClassVar[int]
    START_FROM_FIELD_NUMBER: _ClassVar[int]
    PRINCIPAL_FIELD_NUMBER: _ClassVar[int]
    group: str
    member_id: str
    topics: _containers.RepeatedScalarFieldContainer[str]
    session_timeout_ms: int
    client_id: str
    client_host: str
    start_from: int
    principal: str
    def __init__(self, group: _Optional[str] = ..., member_id: _Optional[str] = ..., topics: _Optional[_Iterable[str]] = ..., session_timeout_ms: _Optional[int] = ..., client_id: _Optional[str] = ..., client_host: _Optional[str] = ..., start_from: _Optional[int] = ..., principal: _Optional[str] = ...) -> None: ...

class LeaveGroup(_message.Message):
    __slots__ = ("group", "member_ids", "reason")
    GROUP_FIELD_NUMBER: _ClassVar[int]
    MEMBER_IDS_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    group: str
    member_ids: _containers.RepeatedScalarFieldContainer[str]
    reason: str
    def __init__(self, group: _Optional[str] = ..., member_ids: _Optional[_Iterable[str]] = ..., reason: _Optional[str] = ...) -> None: ...

class DeleteGroup(_message.Message):
    __slots__ = ("group", "empty_since_ms", "finish")
    GROUP_FIELD_NUMBER: _ClassVar[int]
    EMPTY_SINCE_MS_FIELD_NUMBER: _ClassVar[int]
    FINISH_FIELD_NUMBER: _ClassVar[int]
    group: str
    empty_since_ms: int
    finish: bool
    def __init__(self, group: _Optional[str] = ..., empty_since_ms: _Optional[int] = ..., finish: _Optional[bool] = ...) -> None: ...

class RestoreTable(_message.Message):
    __slots__ = ("table", "backup_id")
    TABLE_FIELD_NUMBER: _ClassVar[int]
    BACKUP_ID_FIELD_NUMBER: _ClassVar[int]
    table: bytes
    backup_id: str
    def __init__(self, table: _Optional[bytes] = ..., backup_id: _Optional[str] = ...) -> None: ...

class CommitTxn(_message.Message):
    __slots__ = ("app_id", "version", "scope")
    APP_ID_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    SCOPE_FIELD_NUMBER: _ClassVar[int]
    app_id: str
    version: int
    scope: str
    def __init__(self, app_id: _Optional[str] = ..., version: _Optional[int] = ..., scope: _Optional[str] = ...) -> None: ...

class ExpireTxns(_message.Message):
    __slots__ = ("txns", "committed_before_ms")
    TXNS_FIELD_NUMBER: _ClassVar[int]
    COMMITTED_BEFORE_MS_FIELD_NUMBER: _ClassVar[int]
    txns: _containers.RepeatedCompositeFieldContainer[TxnRef]
    committed_before_ms: int
    def __init__(self, txns: _Optional[_Iterable[_Union[TxnRef, _Mapping]]] = ..., committed_before_ms: _Optional[int] = ...) -> None: ...

class TxnRef(_message.Message):
    __slots__ = ("app_id", "scope")
    APP_ID_FIELD_NUMBER: _ClassVar[int]
    SCOPE_FIELD_NUMBER: _ClassVar[int]
    app_id: str
    scope: str
    def __init__(self, app_id: _Optional[str] = ..., scope: _Optional[str] = ...) -> None: ...

class BrokerState(_message.Message):
    __slots__ = ("broker_id", "client_addr", "raft_addr", "rack", "registered_ms")
    BROKER_ID_FIELD_NUMBER: _ClassVar[int]
    CLIENT_ADDR_FIELD_NUMBER: _ClassVar[int]
    RAFT_ADDR_FIELD_NUMBER: _ClassVar[int]
    RACK_FIELD_NUMBER: _ClassVar[int]
    REGISTERED_MS_FIELD_NUMBER: _ClassVar[int]
    broker_id: int
    client_addr: str
    raft_addr: str
    rack: str
    registered_ms: int
    def __init__(self, broker_id: _Optional[int] = ..., client_addr: _Optional[str] = ..., raft_addr: _Optional[str] = ..., rack: _Optional[str] = ..., registered_ms: _Optional[int] = ...) -> None: ...

class PartitionState(_message.Message):
    __slots__ = ("replicas", "revision", "created_index")
    REPLICAS_FIELD_NUMBER: _ClassVar[int]
    REVISION_FIELD_NUMBER: _ClassVar[int]
    CREATED_INDEX_FIELD_NUMBER: _ClassVar[int]
    replicas: _containers.RepeatedScalarFieldContainer[int]
    revision: int
    created_index: int
    def __init__(self, replicas: _Optional[_Iterable[int]] = ..., revision: _Optional[int] = ..., created_index: _Optional[int] = ...) -> None: ...

class TopicState(_message.Message):
    __slots__ = ("name", "topic_id", "config", "partitions", "created_ms", "revision", "created_index")
    NAME_FIELD_NUMBER: _ClassVar[int]
    TOPIC_ID_FIELD_NUMBER: _ClassVar[int]
    CONFIG_FIELD_NUMBER: _ClassVar[int]
    PARTITIONS_FIELD_NUMBER: _ClassVar[int]
    CREATED_MS_FIELD_NUMBER: _ClassVar[int]
    REVISION_FIELD_NUMBER: _ClassVar[int]
    CREATED_INDEX_FIELD_NUMBER: _ClassVar[int]
    name: str
    topic_id: int
    config: _common_pb2.TopicConfig
    partitions: _containers.RepeatedCompositeFieldContainer[PartitionState]
    created_ms: int
    revision: int
    created_index: int
    def __init__(self, name: _Optional[str] = ..., topic_id: _Optional[int] = ..., config: _Optional[_Union[_common_pb2.TopicConfig, _Mapping]] = ..., partitions: _Optional[_Iterable[_Union[PartitionState, _Mapping]]] = ..., created_ms: _Optional[int] = ..., revision: _Optional[int] = ..., created_index: _Optional[int] = ...) -> None: ...

class TopicPartitionRef(_message.Message):
    __slots__ = ("topic", "partition")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    topic: str
    partition: int
    def __init__(self, topic: _Optional[str] = ..., partition: _Optional[int] = ...) -> None: ...

class MemberState(_message.Message):
    __slots__ = ("member_id", "topics", "session_timeout_ms", "client_id", "client_host", "joined_ms", "assignment", "start_from", "principal")
    MEMBER_ID_FIELD_NUMBER: _ClassVar[int]
    TOPICS_FIELD_NUMBER: _ClassVar[int]
    SESSION_TIMEOUT_MS_FIELD_NUMBER: _ClassVar[int]
    CLIENT_ID_FIELD_NUMBER: _ClassVar[int]
    CLIENT_HOST_FIELD_NUMBER: _ClassVar[int]
    JOINED_MS_FIELD_NUMBER: _ClassVar[int]
    ASSIGNMENT_FIELD_NUMBER: _ClassVar[int]
    START_FROM_FIELD_NUMBER: _ClassVar[int]
    PRINCIPAL_FIELD_NUMBER: _ClassVar[int]
    member_id: str
    topics: _containers.RepeatedScalarFieldContainer[str]
    session_timeout_ms: int
    client_id: str
    client_host: str
    joined_ms: int
    assignment: _containers.RepeatedCompositeFieldContainer[TopicPartitionRef]
    start_from: int
    principal: str
    def __init__(self, member_id: _Optional[str] = ..., topics: _Optional[_Iterable[str]] = ..., session_timeout_ms: _Optional[int] = ..., client_id: _Optional[str] = ..., client_host: _Optional[str] = ..., joined_ms: _Optional[int] = ..., assignment: _Optional[_Iterable[_Union[TopicPartitionRef, _Mapping]]] = ..., start_from: _Optional[int] = ..., principal: _Optional[str] = ...) -> None: ...

class GroupState(_message.Message):
    __slots__ = ("name", "generation", "members", "topics", "empty_since_ms", "deleting")
    NAME_FIELD_NUMBER: _ClassVar[int]
    GENERATION_FIELD_NUMBER: _ClassVar[int]
    MEMBERS_FIELD_NUMBER: _ClassVar[int]
    TOPICS_FIELD_NUMBER: _ClassVar[int]
    EMPTY_SINCE_MS_FIELD_NUMBER: _ClassVar[int]
    DELETING_FIELD_NUMBER: _ClassVar[int]
    name: str
    generation: int
    members: _containers.RepeatedCompositeFieldContainer[MemberState]
    topics: _containers.RepeatedScalarFieldContainer[str]
    empty_since_ms: int
    deleting: bool
    def __init__(self, name: _Optional[str] = ..., generation: _Optional[int] = ..., members: _Optional[_Iterable[_Union[MemberState, _Mapping]]] = ..., topics: _Optional[_Iterable[str]] = ..., empty_since_ms: _Optional[int] = ..., deleting: _Optional[bool] = ...) -> None: ...

class TxnWatermark(_message.Message):
    __slots__ = ("app_id", "version", "scope", "committed_ms")
    APP_ID_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    SCOPE_FIELD_NUMBER: _ClassVar[int]
    COMMITTED_MS_FIELD_NUMBER: _ClassVar[int]
    app_id: str
    version: int
    scope: str
    committed_ms: int
    def __init__(self, app_id: _Optional[str] = ..., version: _Optional[int] = ..., scope: _Optional[str] = ..., committed_ms: _Optional[int] = ...) -> None: ...

class ClusterSnapshot(_message.Message):
    __slots__ = ("applied_index", "clock_ms", "next_topic_id", "brokers", "topics", "groups", "txns", "cluster_id", "restored_from")
    APPLIED_INDEX_FIELD_NUMBER: _ClassVar[int]
    CLOCK_MS_FIELD_NUMBER: _ClassVar[int]
    NEXT_TOPIC_ID_FIELD_NUMBER: _ClassVar[int]
    BROKERS_FIELD_NUMBER: _ClassVar[int]
    TOPICS_FIELD_NUMBER: _ClassVar[int]
    GROUPS_FIELD_NUMBER: _ClassVar[int]
    TXNS_FIELD_NUMBER: _ClassVar[int]
    CLUSTER_ID_FIELD_NUMBER: _ClassVar[int]
    RESTORED_FROM_FIELD_NUMBER: _ClassVar[int]
    applied_index: int
    clock_ms: int
    next_topic_id: int
    brokers: _containers.RepeatedCompositeFieldContainer[BrokerState]
    topics: _containers.RepeatedCompositeFieldContainer[TopicState]
    groups: _containers.RepeatedCompositeFieldContainer[GroupState]
    txns: _containers.RepeatedCompositeFieldContainer[TxnWatermark]
    cluster_id: str
    restored_from: str
    def __init__(self, applied_index: _Optional[int] = ..., clock_ms: _Optional[int] = ..., next_topic_id: _Optional[int] = ..., brokers: _Optional[_Iterable[_Union[BrokerState, _Mapping]]] = ..., topics: _Optional[_Iterable[_Union[TopicState, _Mapping]]] = ..., groups: _Optional[_Iterable[_Union[GroupState, _Mapping]]] = ..., txns: _Optional[_Iterable[_Union[TxnWatermark, _Mapping]]] = ..., cluster_id: _Optional[str] = ..., restored_from: _Optional[str] = ...) -> None: ...

class MetaResult(_message.Message):
    __slots__ = ("error", "message", "skipped", "changed", "broker", "topic", "group", "generation", "assignment", "unknown_topics", "txn_version", "rebalanced_groups")
    ERROR_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    SKIPPED_FIELD_NUMBER: _ClassVar[int]
    CHANGED_FIELD_NUMBER: _ClassVar[int]
    BROKER_FIELD_NUMBER: _ClassVar[int]
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    GROUP_FIELD_NUMBER: _ClassVar[int]
    GENERATION_FIELD_NUMBER: _ClassVar[int]
    ASSIGNMENT_FIELD_NUMBER: _ClassVar[int]
    UNKNOWN_TOPICS_FIELD_NUMBER: _ClassVar[int]
    TXN_VERSION_FIELD_NUMBER: _ClassVar[int]
    REBALANCED_GROUPS_FIELD_NUMBER: _ClassVar[int]
    error: _common_pb2.ErrorCode
    message: str
    skipped: bool
    changed: bool
    broker: BrokerState
    topic: TopicState
    group: GroupState
    generation: int
    assignment: _containers.RepeatedCompositeFieldContainer[TopicPartitionRef]
    unknown_topics: _containers.RepeatedScalarFieldContainer[str]
    txn_version: int
    rebalanced_groups: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, error: _Optional[_Union[_common_pb2.ErrorCode, str]] = ..., message: _Optional[str] = ..., skipped: _Optional[bool] = ..., changed: _Optional[bool] = ..., broker: _Optional[_Union[BrokerState, _Mapping]] = ..., topic: _Optional[_Union[TopicState, _Mapping]] = ..., group: _Optional[_Union[GroupState, _Mapping]] = ..., generation: _Optional[int] = ..., assignment: _Optional[_Iterable[_Union[TopicPartitionRef, _Mapping]]] = ..., unknown_topics: _Optional[_Iterable[str]] = ..., txn_version: _Optional[int] = ..., rebalanced_groups: _Optional[_Iterable[str]] = ...) -> None: ...
