/**
 * The gRPC half of the job service, the part that needs @grpc/grpc-js: the service's process
 * (`denit job serve`) and the `denit job` client. A module of its own that the entry loads by a
 * specifier the bundler does not follow, so that the main bundle stays free of it (in the
 * bundle it is dist/denit-jobs.js beside dist/denit.js; from the sources and in the compiled
 * binary it is this file). denit itself (PID 1) never loads it. Load it only after
 * `provideRequire()` (require.ts).
 */

export { jobMain } from "./client.ts";
