/** The one argument scanner: argv and DENIT_* twins → values that remember their source. */

import { UsageError } from "./errors.ts";

/** One option: its names on the command line, and optionally its environment variable. */
export interface OptionSpec {
  readonly key: string;
  /** "-g", "--group": the first long name is the one messages use. */
  readonly names: readonly string[];
  /** "optional": a flag, or `--name=VALUE` (a value only after "="). */
  readonly kind: "flag" | "value" | "optional";
  readonly env?: string;
}

/** The spec of an option whose key is its last name without dashes ("-g --group": "group"). */
export function option(names: string, kind: OptionSpec["kind"], env?: string): OptionSpec {
  const list = names.split(" ");
  const key = (list.at(-1) ?? "").replace(/^-+/, "");
  return env === undefined ? { key, names: list, kind } : { key, names: list, kind, env };
}

/** A value and where it came from: an option name or an environment variable. */
export interface Sourced {
  readonly value: string;
  readonly from: string;
}

export interface Scan {
  /** Flag key → how often it was given (an "optional" option without its value too). */
  readonly flags: ReadonlyMap<string, number>;
  readonly values: ReadonlyMap<string, readonly Sourced[]>;
  readonly positional: readonly string[];
}

/** Splits "-gsv" into "-g", "-s", "-v" and "-rTERM:QUIT" into "-r", "TERM:QUIT". */
function expandShort(arg: string, names: ReadonlyMap<string, OptionSpec>): string[] {
  const out: string[] = [];
  for (let i = 1; i < arg.length; i++) {
    const name = `-${arg[i]}`;
    out.push(name);
    if (names.get(name)?.kind === "value" && i + 1 < arg.length) {
      out.push(arg.slice(i + 1));
      break;
    }
  }
  return out;
}

/**
 * Scans argv; throws UsageError for an unknown option or a missing value. `stopAtPositional`: the
 * first word that is not an option and all after it are positional (`denit ls -l`, getopt's "+").
 */
export function scanArgs(
  args: readonly string[],
  specs: readonly OptionSpec[],
  options: { readonly stopAtPositional: boolean },
): Scan {
  const names = new Map(specs.flatMap((spec) => spec.names.map((name) => [name, spec] as const)));
  const flags = new Map<string, number>();
  const values = new Map<string, Sourced[]>();
  const positional: string[] = [];
  const pending = [...args];
  for (let arg = pending.shift(); arg !== undefined; arg = pending.shift()) {
    if (arg === "--") {
      positional.push(...pending);
      break;
    }
    if (!arg.startsWith("-") || arg === "-") {
      positional.push(arg);
      if (options.stopAtPositional) {
        positional.push(...pending);
        break;
      }
      continue;
    }
    if (!arg.startsWith("--") && arg.length > 2) {
      pending.unshift(...expandShort(arg, names));
      continue;
    }
    const eq = arg.startsWith("--") ? arg.indexOf("=") : -1;
    const name = eq > 0 ? arg.slice(0, eq) : arg;
    const spec = names.get(name);
    if (spec === undefined) {
      const near = name.startsWith("--") ? closest(name, [...names.keys()], 3) : null;
      throw new UsageError(
        `Unknown option "${name}"${near === null ? "" : `; did you mean ${near}?`}`,
      );
    }
    if (spec.kind === "flag" || (spec.kind === "optional" && eq < 0)) {
      if (eq > 0) throw new UsageError(`Option "${name}" takes no value`);
      flags.set(spec.key, (flags.get(spec.key) ?? 0) + 1);
      continue;
    }
    const value = eq > 0 ? arg.slice(eq + 1) : pending.shift();
    if (value === undefined) throw new UsageError(`Option "${name}" needs a value`);
    values.set(spec.key, [...(values.get(spec.key) ?? []), { value, from: name }]);
  }
  return { flags, values, positional };
}

const TRUE = ["1", "true", "yes", "on"];
const FALSE = ["", "0", "false", "no", "off"];

/** Parses a boolean environment value; throws RangeError listing what is accepted. */
export function parseBoolean(text: string): boolean {
  const lowered = text.trim().toLowerCase();
  if (TRUE.includes(lowered)) return true;
  if (FALSE.includes(lowered)) return false;
  throw new RangeError(
    `Invalid value "${text}": use ${TRUE.join("/")} or ${FALSE.slice(1).join("/")}`,
  );
}

/** Runs a parser; its RangeError becomes a UsageError that names the value's source. */
export function parseFrom<T>(source: Sourced, parse: (text: string) => T): T {
  try {
    return parse(source.value);
  } catch (err: unknown) {
    if (err instanceof RangeError) throw new UsageError(`${err.message} (from ${source.from})`);
    throw err;
  }
}

/** Settings: the command line, else the environment twin; an empty value is none at all. */
export class Settings {
  readonly #scan: Scan;
  readonly #specs: ReadonlyMap<string, OptionSpec>;
  readonly #env: Readonly<Record<string, string>>;

  constructor(scan: Scan, specs: readonly OptionSpec[], env: Readonly<Record<string, string>>) {
    this.#scan = scan;
    this.#specs = new Map(specs.map((spec) => [spec.key, spec]));
    this.#env = env;
  }

  #variable(key: string): Sourced | undefined {
    const variable = this.#specs.get(key)?.env;
    const value = variable === undefined ? undefined : this.#env[variable];
    if (variable === undefined || value === undefined || value.trim() === "") return undefined;
    return { value, from: variable };
  }

  count(key: string): number {
    return this.#scan.flags.get(key) ?? 0;
  }

  /** A flag: given, or its variable set to a true value. */
  flag(key: string): boolean {
    if (this.count(key) > 0) return true;
    const variable = this.#variable(key);
    return variable !== undefined && parseFrom(variable, parseBoolean);
  }

  /** The last value given, else the variable's value; an empty one counts as not given. */
  last(key: string): Sourced | undefined {
    const given = this.#scan.values.get(key)?.at(-1);
    if (given === undefined) return this.#variable(key);
    return given.value.trim() === "" ? undefined : given;
  }

  /** Every value given; else the variable's value split at commas and blanks. */
  list(key: string): readonly Sourced[] {
    const given = this.#scan.values.get(key);
    if (given !== undefined) return given;
    const variable = this.#variable(key);
    const values = variable?.value.split(/[,\s]+/).filter((item) => item !== "") ?? [];
    return values.map((value) => ({ value, from: variable?.from ?? "" }));
  }
}

/** The Levenshtein distance between two short strings. */
function distance(a: string, b: string): number {
  let previous = Array.from({ length: b.length + 1 }, (_, i) => i);
  for (let i = 1; i <= a.length; i++) {
    const current = [i];
    for (let j = 1; j <= b.length; j++) {
      const substitution = (previous[j - 1] ?? 0) + (a[i - 1] === b[j - 1] ? 0 : 1);
      current.push(Math.min((previous[j] ?? 0) + 1, (current[j - 1] ?? 0) + 1, substitution));
    }
    previous = current;
  }
  return previous[b.length] ?? 0;
}

function closest(name: string, candidates: readonly string[], limit: number): string | null {
  let best: string | null = null;
  let bestDistance = Infinity;
  for (const candidate of candidates) {
    const d = distance(name, candidate);
    if (d < bestDistance) [best, bestDistance] = [candidate, d];
  }
  return bestDistance <= limit ? best : null;
}

/** A warning for each variable starting with `prefix` not in `known`, with the closest known. */
export function unknownVariables(
  env: Readonly<Record<string, string>>,
  prefix: string,
  known: readonly string[],
): string[] {
  const unknown = Object.keys(env).filter((name) =>
    name.startsWith(prefix) && !known.includes(name)
  );
  return unknown.sort().map((name) => {
    const near = closest(name, known, 4);
    return `unknown variable ${name} is ignored${near === null ? "" : `; did you mean ${near}?`}`;
  });
}
