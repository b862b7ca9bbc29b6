/** jobs.proto (imported as text: the bundle holds it) and the gRPC definitions made from it. */

import * as grpc from "@grpc/grpc-js";
import { fromJSON } from "@grpc/proto-loader";
import protobuf from "protobufjs";
import JOBS_PROTO from "../../proto/denit/jobs/v1/jobs.proto" with { type: "text" };

export const JOBS_SERVICE = "denit.jobs.v1.Jobs";

/**
 * grpc-js at its errors only, each a line to `say`: GRPC_TRACE and GRPC_VERBOSITY in the
 * container's environment are meant for its own programs (the jobs get them unchanged).
 */
export function quietGrpc(say: (line: string) => void): void {
  grpc.setLogVerbosity(grpc.logVerbosity.ERROR);
  grpc.setLogger({ error: (...args: unknown[]) => say(args.join(" ")) });
}

/** The methods with their (de)serialisers: 64-bit integers as numbers, enums as names. */
export function jobsDefinition(): grpc.ServiceDefinition {
  // Field names in camelCase (workDir for work_dir), as proto-loader gives them by default.
  const root = protobuf.parse(JOBS_PROTO).root;
  const definitions = fromJSON(root.toJSON(), { longs: Number, enums: String, defaults: true });
  const service = definitions[JOBS_SERVICE];
  if (service === undefined || !("Run" in service)) {
    throw new Error(`${JOBS_SERVICE} is missing from the contract`);
  }
  return service as unknown as grpc.ServiceDefinition;
}
