/** Arguments of `denit copy` and `denit init` → frozen options. Same conventions as cli.ts. */

import { option, type OptionSpec, parseFrom, scanArgs, Settings } from "../common/args.ts";
import { resolveUser } from "../common/accounts.ts";
import { UsageError } from "../common/errors.ts";
import type { Owner } from "./file.ts";

/** Everything `denit copy` / `denit init` was asked. */
export interface CopyInvocation {
  readonly mode: "copy" | "init";
  /** copy: every SRC; init: the --with paths. */
  readonly sources: readonly string[];
  readonly dest: string;
  readonly owner: Owner | null;
  readonly fileMode: number | null;
  readonly verify: boolean;
  readonly dryRun: boolean;
  readonly sync: boolean;
  readonly strict: boolean;
  readonly verbose: boolean;
}

export const COPY_HELP = `Usage: denit copy [OPTIONS] SRC... DEST
       denit init [OPTIONS] DEST [--with PATH]...

copy: each SRC goes into DEST (created with its parents); SRC/. copies the contents of
SRC, hidden files included. Files, directories and symlinks (as links, never followed)
keep their permission bits and times. Each file is written under a temporary name and
renamed into place. Device files, sockets and FIFOs are reported and skipped.
init: puts a runnable denit into DEST, then each --with PATH as copy would.

Options:
      --chown UID:GID  owner of everything copied (numbers or names)
      --chmod MODE     octal mode for copied files (directories keep theirs)
      --verify         re-read each file and compare SHA-256 before renaming it
      --sync           flush data and directories before reporting success
      --strict         refuse (exit 1, nothing written) if SRC holds special files
      --dry-run        print the plan on stdout, write nothing
  -v, --verbose        one line per entry on stderr
  -h, --help           this text

Exit status: 0 done, 1 a file could not be copied (the line names it), 2 usage error,
128+N interrupted by signal N (no temporary file is left).`;

/** Parses "UID:GID" with numbers or names from /etc/passwd and /etc/group. */
export function parseOwner(text: string): Owner {
  if (!/^[^:]+:[^:]+$/.test(text)) {
    throw new RangeError(`Invalid owner "${text}": use UID:GID, like 1001:123 or runner:docker`);
  }
  const { uid, gid } = resolveUser(text);
  return Object.freeze({ uid, gid });
}

/** Parses an octal mode like 755, 0644 or 4755. */
export function parseMode(text: string): number {
  if (!/^0?[0-7]{3,4}$/.test(text)) {
    throw new RangeError(`Invalid mode "${text}": use octal, like 0755`);
  }
  return parseInt(text, 8);
}

const OPTIONS: readonly OptionSpec[] = [
  ...["--chown", "--chmod", "--with"].map((name) => option(name, "value")),
  ...["--verify", "--dry-run", "--sync", "--strict"].map((name) => option(name, "flag")),
  option("-v --verbose", "flag"),
  option("-h --help", "flag"),
];

/** Parses `copy …` or `init …` (args[0] is the mode). */
export function parseCopyInvocation(args: readonly string[]): CopyInvocation | "help" {
  const mode = args[0] === "init" ? "init" : "copy";
  const specs = mode === "init" ? OPTIONS : OPTIONS.filter((spec) => spec.key !== "with");
  const scan = scanArgs(args.slice(1), specs, { stopAtPositional: false });
  if (scan.flags.has("help")) return "help";
  const settings = new Settings(scan, specs, {});
  const positional = scan.positional;
  const dest = positional.at(-1);
  if (mode === "copy" && (positional.length < 2 || dest === undefined)) {
    throw new UsageError("Missing SRC or DEST: copy takes one or more SRC, then DEST");
  }
  if (mode === "init" && (positional.length !== 1 || dest === undefined)) {
    throw new UsageError("Expected one DEST: init takes DEST, and PATHs only with --with");
  }
  const chown = settings.last("chown");
  const chmod = settings.last("chmod");
  return Object.freeze({
    mode,
    sources: mode === "copy" ? positional.slice(0, -1) : settings.list("with").map((w) => w.value),
    dest: dest ?? "",
    owner: chown === undefined ? null : parseFrom(chown, parseOwner),
    fileMode: chmod === undefined ? null : parseFrom(chmod, parseMode),
    verify: settings.flag("verify"),
    dryRun: settings.flag("dry-run"),
    sync: settings.flag("sync"),
    strict: settings.flag("strict"),
    verbose: settings.flag("verbose"),
  });
}
