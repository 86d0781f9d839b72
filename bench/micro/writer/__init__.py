"""Measure the run writer: chunk rows per second into Postgres, CPU per row, memory (RSS).

Runs against its own database (MORTAR_BENCH_DATABASE_URL, default mortar_bench on the local
Postgres; created and migrated if missing, its run tables emptied first) and its own var/
directory for the spool. The targets: ≥ 50,000 chunk rows/s, RSS flat.

    .venv/bin/python -m bench micro writer [--runs 2000] [--chunks 50] [--backlog 1000000]
        [--flood ROWS] [--soak SECONDS --rate ROWS_PER_S] [--gateway-runs 3600]

Phases (each run opens, CHUNKS chunks of 300 bytes, closes; 200 streams interleaved):
- throughput: RUNS runs through a RunWriter kept busy (the producer pauses while more than
  20,000 rows wait, so the writer never needs its spool); rows/s until all are written.
- spool a backlog / drain it: BACKLOG rows left in a spool file, as by a process that died
  during an outage; a new writer claims and drains it (the replay path), RSS sampled each second.
- flood (optional): ROWS submitted with no pause at all; the writer falls behind and spools.
- soak (optional): a steady RATE rows/s for SECONDS, RSS sampled each second.
- gateway batches: `write_batch` alone on batches shaped like the gateway's (each run opens
  with ~17 fields, sends 20 chunks of ~150 bytes and closes with ~15 fields, usage and reply
  text included, in the next batch), 12 and 80 runs a batch; and non-streaming runs (opened and
  closed in the same batch, so stored by one insert), 30 a batch, as one connection's requests
  fill the writer's 50 ms cycle; and 1,000 slow streams, each batch a chunk of every stream.
  For each: the CPU of the calling thread per run (per chunk, for slow streams), and the CPU
  Postgres's backend spends (read from /proc: Postgres must run on this machine).

"writer CPU µs/row" is the CPU time of the writer's thread per chunk row (the share of the
gateway's core that the writer takes); "process CPU" adds the producer's. Writes
bench/results/writer.md.

- meters: RSS, the CPU of the process, of the writer's thread and of a Postgres backend;
- phases: the writer under load (throughput, spool and drain, flood, soak);
- batches: `write_batch` on the gateway's batch shapes and the slow streams'.
- writer_bench: the command line, the phases in order, and the table.
"""
