/**
 * The bundle (`deno bundle`) turns the CommonJS inside @grpc/grpc-js and protobufjs into
 * functions that ask for Node's built-ins (`node:http2`, `node:net`, ...) through a global
 * `require` at the moment they run, and fail without one. This provides it, from node:module,
 * right before the job service or client loads: nothing of it is loaded otherwise. Run from
 * the sources or compiled, the packages load natively and this changes nothing.
 */

interface WithRequire {
  require?: unknown;
}

/** Sets `globalThis.require` (once) so that bundled CommonJS can load Node's built-ins. */
export async function provideRequire(): Promise<void> {
  const scope = globalThis as WithRequire;
  if (scope.require !== undefined) return;
  const { createRequire } = await import("node:module");
  scope.require = createRequire(import.meta.url);
}
