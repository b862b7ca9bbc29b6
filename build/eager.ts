/**
 * A build step for dist/denit.js: the functions a plain start calls are marked for V8 to
 * compile at once, so that they land in the runtime's code cache, which ships beside the
 * bundle (src/copy/cache.ts).
 *
 * Why: Deno makes a module's code cache right after compiling it, before it runs, so the cache
 * holds only what V8 compiled eagerly: the top level, not the functions, and every function a
 * start calls would be parsed and compiled again at every start. V8 compiles a parenthesised
 * function expression at once (its "PIFE" heuristic, meant for `(function () {...})()`), and
 * the code cache keeps it; a function declaration has no such form, so it becomes a
 * parenthesised expression assigned at the top of the bundle (where a top-level declaration is
 * instantiated anyway), and a class method a field that holds a parenthesised arrow (V8 compiles
 * a class's field initialisers with the script), or for an async method a parenthesised async
 * function bound to the instance (V8 compiles a parenthesised async arrow only when it is
 * called). Only what a plain start calls is marked: where no cache is kept, what never runs is
 * not compiled. Accessors, constructors and object methods stay lazy.
 *
 * Which functions a plain start calls comes from V8 itself: the bundle runs once under the
 * launcher, `denit -s -- /bin/true`, with V8's function log on stdout (a launcher this step
 * builds with `-DV8_EXTRA`, never shipped), and every function V8 compiled on its way is marked. A function
 * the profile missed (another path taken on another machine) is compiled when called, as
 * before: the mark changes when V8 compiles, never what runs.
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
  /** Class methods, made fields that hold parenthesised arrows. */
  readonly methods: number;
  /** Called, but with no eager form: accessors, constructors, object methods, the rest. */
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

/** Every identifier named in an `extends` clause: those classes keep their methods. */
function extendedNames(root: Node): Set<string> {
  const names = new Set<string>();
  for (const { node } of nodesOf(root)) {
    if (!node.type.startsWith("Class") || !isNode(node.superClass)) continue;
    for (const part of nodesOf(node.superClass)) {
      if (part.node.type === "Identifier") names.add(String(part.node.name));
    }
  }
  return names;
}

/** The name a class is bound to: its own, or the variable or target it is assigned to. */
function classNames(klass: Node, parent: Node | null): string[] {
  const names: string[] = [];
  if (isNode(klass.id)) names.push(String(klass.id.name));
  const target = parent?.type === "VariableDeclarator"
    ? parent.id
    : parent?.type === "AssignmentExpression"
    ? parent.left
    : null;
  if (isNode(target) && target.type === "Identifier") names.push(String(target.name));
  return names;
}

/**
 * A method whose body can move to a private field holding an arrow (`#m(a){...}` becomes
 * `#m=((a)=>{...});`, and `m(a){...}` a stub `m(a){return this.#eager_m(a)}` beside the field
 * `#eager_m=((a)=>{...});`, so that nothing enumerable changes; an async one holds
 * `(async function(a){...}).bind(this)`): a plain method (not an accessor, a constructor or a
 * generator) with a fixed name and parameters that are names (with literal defaults at most),
 * of a class that extends nothing and that nothing extends, whose body has no `arguments`,
 * `super` or `new.target` (an arrow would see other ones). The field's `this` is the instance
 * (for a static method, the class), as the method's is when called on it.
 */
function convertible(method: Node, klass: Node, classParent: Node | null, extended: Set<string>) {
  const fn = method.value as Node;
  if (method.kind !== "method" || method.computed === true || fn.generator === true) return false;
  if (!(fn.params as Node[]).every(plainParameter)) return false;
  if (isNode(klass.superClass)) return false;
  // Moved already (the stub of an earlier pass): once is all.
  const members = ((klass.body as Node).body as Node[]).map((member) => member.key);
  const key = method.key as Node;
  if (
    members.some((m) =>
      isNode(m) && m.type === "PrivateIdentifier" && m.name === `eager_${key.name}`
    )
  ) {
    return false;
  }
  if (classNames(klass, classParent).some((name) => extended.has(name))) return false;
  return !nodesOf(fn).some(({ node }) =>
    node.type === "Super" || node.type === "MetaProperty" ||
    (node.type === "Identifier" && node.name === "arguments")
  );
}

/** A parameter a moved method can keep as it is: a name, or a name with a literal default. */
function plainParameter(param: Node): boolean {
  if (param.type === "Identifier") return true;
  const { left, right } = param as { left?: unknown; right?: unknown };
  return param.type === "AssignmentPattern" && isNode(left) && left.type === "Identifier" &&
    isNode(right) && right.type === "Literal";
}

/** One rewrite of the source, over the range of its node. */
type Region =
  | { kind: "wrap"; node: Node } // in parentheses
  | { kind: "hoist"; node: Node; name: string } // gone from here, assigned at the top
  | { kind: "move"; node: Node } // a method: its body moves to a field (a stub stays if public)
  | { kind: "class"; node: Node; methods: Node[] }; // a class body that gets those fields

/**
 * The source with every called function it can mark made eager: expressions and arrows in
 * parentheses, top-level declarations as `var NAME=(function NAME(...){...});` at the top,
 * and methods as fields holding parenthesised arrows (or bound async functions) at the start of
 * their class body (V8 compiles a class's field initialisers, and those in them, with the script).
 */
export function markEager(source: string, ranges: readonly Range[]): {
  source: string;
  report: EagerReport;
} {
  const tree = parseModule(source);
  const parents = new Map(nodesOf(tree).map(({ node, parent }) => [node, parent]));
  const assigned = assignedNames(tree);
  const extended = extendedNames(tree);
  const regions: Region[] = [];
  const classes = new Map<Node, Node[]>();
  let left = 0;
  for (const { node, parent } of calledFunctions(tree, ranges)) {
    if (node.type === "FunctionDeclaration") {
      const name = String((node.id as Node).name);
      if (parent?.type === "Program" && !assigned.has(name)) {
        regions.push({ kind: "hoist", node, name });
      } else left++;
    } else if (parent?.type === "MethodDefinition") {
      const body = parents.get(parent) ?? null;
      const klass = body === null ? null : parents.get(body) ?? null;
      if (
        body !== null && klass !== null &&
        convertible(parent, klass, parents.get(klass) ?? null, extended)
      ) {
        regions.push({ kind: "move", node: parent });
        classes.set(body, [...(classes.get(body) ?? []), parent]);
      } else left++;
    } else if (isMethodValue(parent)) {
      left++;
    } else if (parent?.type !== "ParenthesizedExpression") {
      regions.push({ kind: "wrap", node });
    }
  }
  for (const [node, methods] of classes) regions.push({ kind: "class", node, methods });
  // Outer before inner: by start, then the longer first.
  regions.sort((a, b) => a.node.start - b.node.start || b.node.end - a.node.end);
  const top: string[] = [];

  /** The source from `low` to `high`, each outermost region in it rewritten (not `self`). */
  const render = (low: number, high: number, self: Region | null = null): string => {
    let out = "";
    let at = low;
    for (const region of regions) {
      if (region === self || region.node.start < at || region.node.end > high) continue;
      out += source.slice(at, region.node.start) + rewrite(region);
      at = region.node.end;
    }
    return out + source.slice(at, high);
  };
  /** A moved method's field name: its own if private, else `#eager_NAME` behind a stub. */
  const fieldName = (method: Node): string => {
    const key = method.key as Node;
    return key.type === "PrivateIdentifier" ? `#${key.name}` : `#eager_${key.name}`;
  };
  /** The parameters as written (defaults included), and their names. */
  const parameters = (method: Node): string =>
    ((method.value as Node).params as Node[]).map((p) => source.slice(p.start, p.end)).join(",");
  const names = (method: Node): string =>
    ((method.value as Node).params as Node[]).map((p) =>
      String(p.type === "AssignmentPattern" ? (p.left as Node).name : p.name)
    ).join(",");
  const prefix = (method: Node): string => method.static === true ? "static " : "";
  // V8 compiles a parenthesised arrow with its surroundings, but not an async one: an async
  // method becomes a parenthesised async function bound to the instance (or the class).
  const field = (method: Node): string => {
    const fn = method.value as Node;
    const body = render((fn.body as Node).start, (fn.body as Node).end);
    const value = fn.async === true
      ? `(async function(${parameters(method)})${body}).bind(this)`
      : `((${parameters(method)})=>${body})`;
    return `${prefix(method)}${fieldName(method)}=${value};`;
  };
  const stub = (method: Node): string => {
    const key = method.key as Node;
    if (key.type === "PrivateIdentifier") return "";
    return `${prefix(method)}${key.name}(${parameters(method)}){return this.${fieldName(method)}(${
      names(method)
    })}`;
  };
  const rewrite = (region: Region): string => {
    switch (region.kind) {
      case "wrap":
        return `(${render(region.node.start, region.node.end, region)})`;
      case "hoist":
        top.push(`var ${region.name}=(${render(region.node.start, region.node.end, region)});`);
        return "";
      case "move":
        return stub(region.node);
      case "class":
        return `{${region.methods.map(field).join("")}${
          render(region.node.start + 1, region.node.end, region)
        }`;
    }
  };
  const body = render(0, source.length);
  const out = top.join("") + body;
  parseModule(out); // what V8 will load must still parse
  const count = (kind: Region["kind"]) => regions.filter((r) => r.kind === kind).length;
  return {
    source: out,
    report: {
      expressions: count("wrap"),
      declarations: count("hoist"),
      methods: count("move"),
      left,
    },
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

/** V8's flags that log every function it compiles, to stdout. */
const FUNCTION_LOG_FLAGS = ",--log-function-events,--logfile=-,--no-logfile-per-isolate";

/** Runs `command` and returns its stdout; throws with stderr's first line if it fails. */
async function stdoutOf(command: readonly string[]): Promise<string> {
  const [program = "", ...args] = command;
  const { code, stdout, stderr } = await new Deno.Command(program, { args, stdin: "null" })
    .output();
  if (code !== 0) {
    const detail = new TextDecoder().decode(stderr).trim().split("\n")[0];
    throw new Error(`${command.join(" ")} exited with ${code}: ${detail}`);
  }
  return new TextDecoder().decode(stdout);
}

/** `deno run FILE` on this runtime with V8's function log: the log (and what FILE prints). */
export function moduleLog(file: string): Promise<string> {
  const flags = `--v8-flags=${FUNCTION_LOG_FLAGS.slice(1)}`;
  return stdoutOf([Deno.execPath(), "run", "--quiet", "--no-config", "--no-lock", flags, file]);
}

/**
 * A plain start's log: `bundle` run by a launcher built from launch/ with the function log among
 * its V8 flags, this runtime beside them, no cache (every function is compiled and logged).
 */
export async function startLog(bundle: string): Promise<string> {
  const dir = await Deno.makeTempDir({ prefix: "denit-eager-" });
  try {
    const sources = new URL("../launch/", import.meta.url).pathname;
    const c = (await Array.fromAsync(Deno.readDir(sources))).filter((e) => e.name.endsWith(".c"));
    await stdoutOf([
      "gcc",
      "-O2",
      "-static",
      `-DV8_EXTRA="${FUNCTION_LOG_FLAGS}"`,
      "-o",
      `${dir}/denit`,
      ...c.map((e) => `${sources}${e.name}`),
    ]);
    await Deno.symlink(Deno.execPath(), `${dir}/deno`);
    await Deno.copyFile(bundle, `${dir}/denit.js`);
    return await stdoutOf([`${dir}/denit`, "-s", "--", "/bin/true"]);
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
}

if (import.meta.main) {
  const [input, output] = Deno.args;
  if (input === undefined || output === undefined) {
    throw new Error("usage: deno run --allow-all build/eager.ts IN.js OUT.js");
  }
  const ranges = compiledRanges(await startLog(input), "denit.js");
  // No range means the log's format changed (another V8): fail rather than ship a slow start.
  if (ranges.length === 0) throw new Error(`V8's log holds no function of ${input}`);
  const { source, report } = markEager(await Deno.readTextFile(input), ranges);
  await Deno.writeTextFile(output, source);
  const line = `eager: of ${ranges.length} functions compiled, ${report.expressions} ` +
    `expressions, ${report.declarations} declarations and ${report.methods} methods marked, ` +
    `${report.left} left lazy\n`;
  await Deno.stderr.write(new TextEncoder().encode(line));
}
