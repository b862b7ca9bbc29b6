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
