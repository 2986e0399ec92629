"""The chaos harness: real broker processes, a workload, seeded faults, an offline checker.

    make chaos DURATION=600            # or: python -m tests.chaos run --duration 600
    RAFTQ_SEED=1234 make chaos         # replay a run's fault schedule
    python -m tests.chaos check DIR    # re-check a run directory offline

- proxy.py: fault-injecting TCP proxy on the raft links (network partitions);
- broker_shim.py: ``raftq serve`` with the raft listener behind the proxy;
- schedule.py: the seeded fault schedule (kill -9, SIGSTOP, partitions, power loss, consumers);
- workload.py, consumer.py: producers and consumer processes logging every operation;
- harness.py: the run; checker.py: what is verified (see its docstring).
"""
