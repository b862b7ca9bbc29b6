/**
 * The bundled CommonJS of @grpc/grpc-js and protobufjs asks for Node's built-ins through a
 * global `require`: provided from node:module, right before the job half loads.
 */

/** Sets `globalThis.require` (once) so that bundled CommonJS can load Node's built-ins. */
export async function provideRequire(): Promise<void> {
  const scope = globalThis as { require?: unknown };
  if (scope.require !== undefined) return;
  const { createRequire } = await import("node:module");
  scope.require = createRequire(import.meta.url);
}
