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

/**
 * The variable in which denit's launcher (launch/denit.c) names its memfd, itself and, on a
 * terminal, the real stderr it kept: "FD:PATH" or "FD:PATH:STDERR_FD".
 */
export const LAUNCH_VARIABLE = "DENIT_LAUNCH";

/** What DENIT_LAUNCH says; null without the launcher. */
export function launchInfo(): { memfd: number; path: string; stderr: number | null } | null {
  const value = Deno.env.get(LAUNCH_VARIABLE);
  if (value === undefined) return null;
  const [memfd = "", path = "", stderr] = value.split(":");
  if (!/^\d+$/.test(memfd) || path === "") return null;
  return {
    memfd: Number(memfd),
    path,
    stderr: stderr !== undefined && /^\d+$/.test(stderr) ? Number(stderr) : null,
  };
}

/** The launcher that started this runtime, if one did. */
export function launcherPath(): string | null {
  return launchInfo()?.path ?? null;
}

/** What the launcher set aside and what it added, from the memfd's bytes. */
export interface LaunchEnvironment {
  /** "NAME=VALUE" entries moved out of the runtime's way, as raw bytes. */
  readonly moved: readonly Uint8Array[];
  /** Variables the launcher set for the runtime. */
  readonly added: readonly string[];
}

/** Parses the memfd: NUL-ended entries, an empty one, then NUL-ended names. */
export function parseLaunchEnvironment(bytes: Uint8Array): LaunchEnvironment {
  const moved: Uint8Array[] = [];
  const added: string[] = [];
  let inAdded = false;
  for (let start = 0; start < bytes.length;) {
    let end = bytes.indexOf(0, start);
    if (end < 0) end = bytes.length;
    const entry = bytes.subarray(start, end);
    if (entry.length === 0 && !inAdded) inAdded = true;
    else if (inAdded) added.push(new TextDecoder().decode(entry));
    else moved.push(entry);
    start = end + 1;
  }
  return { moved, added };
}

/** True when NODE_OPTIONS asks for an inspector (what `deno run` reads, cli/args/flags.rs). */
export function asksForInspector(nodeOptions: string | undefined): boolean {
  if (nodeOptions === undefined) return false;
  return nodeOptions.split(/\s+/).some((word) =>
    /^--inspect(-brk|-wait)?(=|$)/.test(word.replace(/^["']/, ""))
  );
}
