/**
 * denit's optional half: the programs a plain `denit -- CMD` never runs (copy mode, the health
 * endpoint). mod.ts loads it on first use by a specifier the bundler does not follow, so that it
 * is dist/denit-features.js beside dist/denit.js and a plain start neither parses nor compiles
 * any of it; from the sources it is this module. Each part is evaluated only when asked for.
 *
 * @module
 */

/** `denit init` and `denit copy`. */
export const copy = (): Promise<typeof import("./src/copy/main.ts")> =>
  import("./src/copy/main.ts");
/** The health endpoint (`--health-addr`). */
export const health = (): Promise<typeof import("./src/health/endpoint.ts")> =>
  import("./src/health/endpoint.ts");
