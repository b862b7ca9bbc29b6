/** How the Deno runtime runs the bundle; bin/permissions holds the same list (a test checks). */

/** Permissions of the compiled binary and of the bundle launcher. */
export const PERMISSION_FLAGS: readonly string[] = ["--allow-all", "--no-prompt"];

/** `deno` arguments before the bundle path, for the bundle form's entrypoint. */
export const RUN_FLAGS: readonly string[] = [
  "run",
  "--quiet",
  "--no-config",
  "--no-lock",
  ...PERMISSION_FLAGS,
];

/** The variable `deno run` sets when it put its `node` shim on PATH. */
const SHIM_ACTIVE = "DENO_NODE_SHIM_ACTIVE";
/** The directory of that shim, inside DENO_DIR. */
const SHIM_DIR = "/node_compat_bin";

/** What `undoRuntimeEnvironment()` changed, for a debug line. */
export interface EnvironmentRepair {
  readonly removed: readonly string[];
}

/**
 * Undoes what `deno run` (2.9.1, cli/node_compat_shim.rs) does to the environment before any
 * script runs when no `node` is on PATH: it prepends DENO_DIR/node_compat_bin (a `node` that
 * is Deno) to PATH and sets DENO_NODE_SHIM_ACTIVE=1, so the child would find a `node` the
 * container never had. The compiled binary does not do this. Call before reading PATH.
 */
export function undoRuntimeEnvironment(): EnvironmentRepair {
  if (Deno.build.standalone || Deno.env.get(SHIM_ACTIVE) !== "1") return { removed: [] };
  const path = Deno.env.get("PATH") ?? "";
  const [first = "", ...rest] = path.split(":");
  if (!first.endsWith(SHIM_DIR)) return { removed: [] };
  Deno.env.delete(SHIM_ACTIVE);
  // prepend_self_path(): an unset (or empty) PATH became the shim directory alone.
  if (rest.length === 0) Deno.env.delete("PATH");
  else Deno.env.set("PATH", rest.join(":"));
  return { removed: [SHIM_ACTIVE, first] };
}

/** True when NODE_OPTIONS asks for an inspector (what `deno run` reads, cli/args/flags.rs). */
export function asksForInspector(nodeOptions: string | undefined): boolean {
  if (nodeOptions === undefined) return false;
  return nodeOptions.split(/\s+/).some((word) =>
    /^--inspect(-brk|-wait)?(=|$)/.test(word.replace(/^["']/, ""))
  );
}
