/**
 * A build step for dist/denit.js: the functions a plain start calls are marked for V8 to
 * compile at once, so that they land in the runtime's code cache.
 *
 * Why: Deno makes a module's code cache right after compiling it, before it runs
 * (`libs/core/modules/map.rs`, 2.9.1), so the cache holds only what V8 compiled eagerly: the
 * top level, not the functions. Every function a start calls was parsed and compiled again at
 * every start, about a third of denit's own start-up. V8 compiles a parenthesised function
 * expression at once (its "PIFE" heuristic, meant for `(function () {...})()`), and the code
 * cache keeps it; a function declaration has no such form, so it becomes a parenthesised
 * expression assigned at the top of the bundle (where a top-level declaration is instantiated
 * anyway). Only what a plain start calls is marked: marking everything would compile code that
 * never runs at every start without a cache (the image's launcher gives the runtime none).
 * Class methods have no eager form and stay lazy.
 *
 * Which functions a plain start calls comes from V8 itself: the bundle runs once,
 * `denit -s -- deno --version`, under `--log-function-events`, and every function V8 compiled
 * on its way is marked. A function the profile missed (another path taken on another machine)
 * is compiled when called, as before: the mark changes when V8 compiles, never what runs.
 *
 *   deno run --allow-all build/eager.ts IN.js OUT.js
 *
 * @module
 */

import { parse } from "acorn";

/** A node of acorn's tree, as far as this step reads it. */
interface Node {
  readonly type: string;
  readonly start: number;
  readonly end: number;
  readonly [key: string]: unknown;
}

/** A source range V8 compiled: from its parameters to the end of its body. */
export type Range = readonly [start: number, end: number];

/** What was marked, and what could not be. */
export interface EagerReport {
  /** Function expressions and arrows, put in parentheses. */
  readonly expressions: number;
  /** Top-level function declarations, made parenthesised expressions at the top. */
  readonly declarations: number;
  /** Called, but with no eager form: methods, accessors, nested declarations. */
  readonly left: number;
}

function isNode(value: unknown): value is Node {
  return typeof value === "object" && value !== null &&
    typeof (value as { type?: unknown }).type === "string" &&
    typeof (value as { start?: unknown }).start === "number";
}

/** Every node of the tree with its parent, in source order. */
function nodesOf(root: Node): Array<{ node: Node; parent: Node | null }> {
  const out: Array<{ node: Node; parent: Node | null }> = [];
  const visit = (node: Node, parent: Node | null) => {
    out.push({ node, parent });
    for (const value of Object.values(node)) {
      for (const child of Array.isArray(value) ? value : [value]) {
        if (isNode(child)) visit(child, node);
      }
    }
  };
  visit(root, null);
  return out;
}

function parseModule(source: string): Node {
  // preserveParens: a function already in parentheses has a ParenthesizedExpression parent.
  const options = { ecmaVersion: "latest", sourceType: "module", preserveParens: true } as const;
  return parse(source, options) as unknown as Node;
}

const FUNCTION_TYPES = ["FunctionDeclaration", "FunctionExpression", "ArrowFunctionExpression"];

/** A function whose node is a method's, accessor's or object method's value: no eager form. */
function isMethodValue(parent: Node | null): boolean {
  if (parent === null) return false;
  if (parent.type === "MethodDefinition") return true;
  return parent.type === "Property" && (parent.method === true || parent.kind !== "init");
}

/**
 * The function nodes V8 compiled, each found by its range: V8 reports a function from its
 * parameters (after the name) to the end of its body; of the nodes that end there (nested
 * arrows can), the innermost that starts at or before that point.
 */
function calledFunctions(root: Node, ranges: readonly Range[]) {
  const functions = nodesOf(root).filter(({ node }) => FUNCTION_TYPES.includes(node.type));
  const byEnd = Map.groupBy(functions, ({ node }) => node.end);
  const called = new Set<(typeof functions)[number]>();
  for (const [start, end] of ranges) {
    let best: (typeof functions)[number] | null = null;
    for (const entry of byEnd.get(end) ?? []) {
      const body = entry.node.body as Node;
      if (entry.node.start > start || start > body.start) continue;
      if (best === null || entry.node.start > best.node.start) best = entry;
    }
    if (best !== null) called.add(best);
  }
  return called;
}

interface Edit {
  readonly at: number;
  readonly end: number;
  readonly text: string;
}

function applyEdits(source: string, edits: Edit[]): string {
  // At one position: an insertion that closes, then one that opens (")(" not "()"), then a
  // removal that starts there.
  const rank = (edit: Edit) => edit.end > edit.at ? 2 : edit.text === ")" ? 0 : 1;
  const sorted = edits.toSorted((a, b) => a.at - b.at || rank(a) - rank(b));
  let out = "";
  let position = 0;
  for (const edit of sorted) {
    if (edit.at < position) throw new Error(`overlapping edits at ${edit.at}`);
    out += source.slice(position, edit.at) + edit.text;
    position = edit.end;
  }
  return out + source.slice(position);
}

/** The names assigned anywhere (`x = ...`, `x++`): such a declaration is left as it is. */
function assignedNames(root: Node): Set<string> {
  const names = new Set<string>();
  for (const { node } of nodesOf(root)) {
    const target = node.type === "AssignmentExpression"
      ? node.left
      : node.type === "UpdateExpression"
      ? node.argument
      : null;
    if (isNode(target) && target.type === "Identifier") names.add(String(target.name));
  }
  return names;
}

/**
 * The source with every called function it can mark made eager: expressions and arrows in
 * parentheses, top-level declarations as `var NAME=(function NAME(...){...});` at the top.
 */
export function markEager(source: string, ranges: readonly Range[]): {
  source: string;
  report: EagerReport;
} {
  const tree = parseModule(source);
  const called = calledFunctions(tree, ranges);
  const assigned = assignedNames(tree);
  const wrap: Edit[] = [];
  const hoist = new Set<string>();
  let left = 0;
  for (const { node, parent } of called) {
    if (node.type === "FunctionDeclaration") {
      const name = String((node.id as Node).name);
      if (parent?.type === "Program" && !assigned.has(name)) hoist.add(name);
      else left++;
    } else if (isMethodValue(parent)) {
      left++;
    } else if (parent?.type !== "ParenthesizedExpression") {
      wrap.push({ at: node.start, end: node.start, text: "(" });
      wrap.push({ at: node.end, end: node.end, text: ")" });
    }
  }
  // Declarations move after the expressions inside them are marked: a second pass.
  const wrapped = applyEdits(source, wrap);
  const moves: Edit[] = [];
  for (const statement of (parseModule(wrapped).body as Node[])) {
    if (statement.type !== "FunctionDeclaration") continue;
    const name = String((statement.id as Node).name);
    if (!hoist.has(name)) continue;
    const text = wrapped.slice(statement.start, statement.end);
    moves.push({ at: statement.start, end: statement.end, text: "" });
    moves.push({ at: 0, end: 0, text: `var ${name}=(${text});` });
  }
  const out = applyEdits(wrapped, moves);
  parseModule(out); // what V8 will load must still parse
  return {
    source: out,
    report: { expressions: wrap.length / 2, declarations: moves.length / 2, left },
  };
}

/**
 * The functions V8 compiled in one script, read from a `--log-function-events` log (V8 14:
 * `function,EVENT,SCRIPT,START,END,MS,TIMESTAMP,NAME`); the script is the one whose
 * `script-details` name ends with `fileName`. `interpreter` is every function compiled to
 * bytecode (with the script or later, when first called); `parse-function` only those compiled
 * later, lazily. The whole script's own range is left out.
 */
export function compiledRanges(
  log: string,
  fileName: string,
  event: "interpreter" | "parse-function" = "interpreter",
): Range[] {
  const lines = log.split("\n").map((line) => line.split(","));
  const script = lines.find((f) => f[0] === "script-details" && f[2]?.endsWith(`/${fileName}`));
  if (script === undefined) return [];
  const ranges: Range[] = [];
  for (const f of lines) {
    if (f[0] !== "function" || f[1] !== event || f[2] !== script[1]) continue;
    const start = Number(f[3]);
    const end = Number(f[4]);
    if (start > 0 && Number.isInteger(start) && Number.isInteger(end)) ranges.push([start, end]);
  }
  return ranges;
}

/**
 * Runs `deno run FILE ARGS` on this runtime under V8's function log, with a cache of its own
 * (a code cache made under other V8 flags is of no use to anyone, and a cached script logs no
 * compilation); the log's text. Throws with the first line of stderr if the run fails.
 */
export async function functionLog(file: string, args: readonly string[]): Promise<string> {
  const dir = await Deno.makeTempDir({ prefix: "denit-eager-" });
  try {
    const log = `${dir}/v8.log`;
    const { code, stderr } = await new Deno.Command(Deno.execPath(), {
      args: [
        "run",
        "--quiet",
        "--no-config",
        "--no-lock",
        "--allow-all",
        "--no-prompt",
        `--v8-flags=--log-function-events,--logfile=${log},--no-logfile-per-isolate`,
        file,
        ...args,
      ],
      env: { DENO_DIR: `${dir}/cache`, DENO_NO_UPDATE_CHECK: "1" },
      stdin: "null",
      stdout: "null",
      stderr: "piped",
    }).output();
    if (code !== 0) {
      const detail = new TextDecoder().decode(stderr).trim().split("\n")[0];
      throw new Error(`${file} under V8's function log exited with ${code}: ${detail}`);
    }
    return await Deno.readTextFile(log);
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
}

/** The plain start the profile is taken from: supervising the runtime's `--version`. */
export const PLAIN_START: readonly string[] = ["-s", "--", Deno.execPath(), "--version"];

if (import.meta.main) {
  const [input, output] = Deno.args;
  if (input === undefined || output === undefined) {
    throw new Error("usage: deno run --allow-all build/eager.ts IN.js OUT.js");
  }
  const log = await functionLog(input, PLAIN_START);
  const ranges = compiledRanges(log, input.split("/").at(-1) ?? input);
  // No range means the log's format changed (another V8): fail rather than ship a slow start.
  if (ranges.length === 0) throw new Error(`V8's log holds no function of ${input}`);
  const { source, report } = markEager(await Deno.readTextFile(input), ranges);
  await Deno.writeTextFile(output, source);
  const line = `eager: ${report.expressions} expressions and ${report.declarations} ` +
    `declarations of ${ranges.length} compiled functions marked, ${report.left} left lazy\n`;
  await Deno.stderr.write(new TextEncoder().encode(line));
}
