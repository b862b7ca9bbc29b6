/**
 * The job service's contract: proto/denit/jobs/v1/jobs.proto, held here as text so that the
 * bundle and the compiled binary need no file beside them (tests/jobs_test.ts checks that the
 * two are the same), and the gRPC definitions made from it with protobufjs and proto-loader.
 * Loaded only by the job service, the `denit job` client and nothing else.
 */

import type * as grpc from "@grpc/grpc-js";
import { fromJSON } from "@grpc/proto-loader";
import protobuf from "protobufjs";

/** The .proto file's text. */
export const JOBS_PROTO =
  `// denit's job service: run, follow, cancel and list commands inside a running container,
// over a Unix socket (denit --jobs-socket PATH). Times are milliseconds since the Unix epoch;
// 0 means "not yet".
syntax = "proto3";

package denit.jobs.v1;

service Jobs {
  // Starts a job, or returns the job that already has this id (nothing is started then).
  rpc Run(RunRequest) returns (Job);
  // The job as it is now, then each change of its status, until it has finished.
  rpc Follow(FollowRequest) returns (stream Job);
  // The job's output from the given byte offsets: what is stored, then what comes, until
  // the job's output ends. Reconnecting with the offsets reached gets every byte once.
  rpc FollowIO(FollowIORequest) returns (stream Output);
  // TERM to the job's process group, KILL after the grace; returns once the job and
  // every process of its group are gone.
  rpc Cancel(CancelRequest) returns (Job);
  // The jobs denit keeps, oldest first, a page at a time.
  rpc List(ListRequest) returns (ListResponse);
}

enum Status {
  STATUS_UNSPECIFIED = 0;
  RUNNING = 1;
  // Exited with code 0.
  SUCCEEDED = 2;
  // Exited with another code (126/127: could not be run), or killed by a signal.
  FAILED = 3;
  // Ended after Cancel.
  CANCELLED = 4;
}

message RunRequest {
  // Chosen by the client: 1 to 128 bytes of letters, digits, '.', '_', ':' or '-'.
  string id = 1;
  // The program and its arguments; argv[0] is looked up in PATH unless it has a '/'.
  repeated string argv = 2;
  // The job's working directory; empty: denit's own.
  string work_dir = 3;
  // Added to (or replacing in) denit's environment; keys match ^[A-Za-z_][A-Za-z0-9_]*$.
  map<string, string> env = 4;
}

message Job {
  string id = 1;
  Status status = 2;
  repeated string argv = 3;
  int32 pid = 4;
  // Set when status is SUCCEEDED or FAILED by an exit, or CANCELLED by an exit.
  int32 exit_code = 5;
  // The signal that ended it ("SIGKILL"), or empty.
  string signal = 6;
  int64 started_at_ms = 7;
  int64 finished_at_ms = 8;
  // Bytes stored so far; output beyond the per-job cap is counted in *_bytes_seen only.
  uint64 stdout_bytes = 9;
  uint64 stderr_bytes = 10;
  bool output_truncated = 11;
  // "oom" when the kernel's OOM killer ended the job (SIGKILL while the container's memory
  // cgroup counted an OOM kill); empty otherwise.
  string cause = 12;
}

message FollowRequest {
  string id = 1;
}

message FollowIORequest {
  string id = 1;
  // Byte offsets to start from (the count already read).
  uint64 read_stdout = 2;
  uint64 read_stderr = 3;
}

message Output {
  // One of the two is set per message.
  bytes stdout = 1;
  bytes stderr = 2;
  // The offset just after this message's bytes in their stream: resume from here.
  uint64 stdout_offset = 3;
  uint64 stderr_offset = 4;
  // Sent once, last: the stored output ended early (the per-job cap, or a full spool).
  bool truncated = 5;
}

message CancelRequest {
  string id = 1;
  // How long after TERM to send KILL; 0: the default (10 s).
  uint32 grace_ms = 2;
}

message ListRequest {
  // The page after this job (empty: from the first).
  string after_id = 1;
  // At most this many jobs (0, or more than 1000: 1000); a page also stops near 1 MiB.
  uint32 limit = 2;
  // Only these jobs (empty: every job).
  repeated string ids = 3;
}

message ListResponse {
  repeated Job jobs = 1;
  // Set when more jobs follow: the after_id of the next page.
  string next_after_id = 2;
}
`;

/** The service's full name. */
export const JOBS_SERVICE = "denit.jobs.v1.Jobs";

/**
 * The service's methods with their (de)serialisers: 64-bit integers as numbers, enums as
 * their names, bytes as Uint8Array-compatible Buffers, every field present.
 */
export function jobsDefinition(): grpc.ServiceDefinition {
  // Field names in camelCase (workDir for work_dir), as proto-loader gives them by default.
  const root = protobuf.parse(JOBS_PROTO).root;
  const definitions = fromJSON(root.toJSON(), {
    longs: Number,
    enums: String,
    defaults: true,
  });
  const service = definitions[JOBS_SERVICE];
  if (service === undefined || !("Run" in service)) {
    throw new Error(`${JOBS_SERVICE} is missing from the contract`);
  }
  return service as unknown as grpc.ServiceDefinition;
}
