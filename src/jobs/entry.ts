/**
 * The half that needs @grpc/grpc-js (`denit job serve` and `denit job`): dist/denit-jobs.js,
 * loaded by a specifier the bundler does not follow, never by PID 1; after `provideRequire()`.
 */

export { jobMain } from "./client.ts";
