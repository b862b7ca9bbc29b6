/**
 * The half that needs @grpc/grpc-js (dist/denit-jobs.js), loaded by a specifier the bundler does
 * not follow, never by PID 1; after `provideRequire()`.
 */

export { jobMain } from "./client.ts";
