/**
 * The build step that marks a plain start's functions for eager compilation (build/eager.ts):
 * V8 itself says what it compiled, before and after, and the marked code does what it did.
 */

import { assertEquals, assertOk } from "./assert.ts";
import { ROOT } from "./helpers.ts";
import { compiledRanges, markEager, moduleLog, startLog } from "../build/eager.ts";

/**
 * A module with each kind of function: declarations, arrows, methods (private, public, static,
 * async with a default, one that reads `arguments`, one that a subclass overrides), a getter,
 * unused code; exports at the end, as in a bundle. What it prints covers what a method's new form could change.
 */
const SAMPLE = `function used(x) { return helper(x) + 1; }
function helper(x) { return [1, 2].map((v) => v * x).reduce((a, b) => a + b, 0); }
function unused() { return 0; }
const arrow = (y) => y * 2;
class Box {
  #n = 7;
  get value() { return this.#n; }
  twice(by) { return arrow(this.#read()) * by; }
  #read() { return this.value; }
  static make() { return new this(); }
  count() { return arguments.length; }
  async later(by = 3) { await null; return this.#n * by; }
}
class Base { name() { return "base"; } }
class Derived extends Base { name() { return "derived " + super.name(); } }
const early = used(1);
const late = () => Box.make().twice(2) + used(2) + new Box().count(1, 2);
const box = new Box();
const shape = [Object.keys(box), Object.getOwnPropertyNames(Box.prototype), Box.make.length];
shape.push(box.later.length, await box.later(), await box.later(2));
console.log(JSON.stringify([early, late(), arrow(3), new Derived().name(), new Base().name(), shape]));
export { used };
`;

async function output(file: string): Promise<string> {
  const { code, stdout } = await new Deno.Command(Deno.execPath(), {
    args: ["run", "--quiet", "--no-config", "--no-lock", file],
    stderr: "inherit",
  }).output();
  assertEquals(code, 0);
  return new TextDecoder().decode(stdout).trim();
}

Deno.test("the called functions are marked eager, V8 compiles none of them lazily, and the module does the same", async () => {
  const dir = await Deno.makeTempDir({ prefix: "denit-eager-test-" });
  try {
    await Deno.writeTextFile(`${dir}/lazy.js`, SAMPLE);
    const before = await moduleLog(`${dir}/lazy.js`);
    const called = compiledRanges(before, "lazy.js");
    const { source, report } = markEager(SAMPLE, called);
    // used and helper hoisted; the map, reduce, late and arrow arrows in parentheses; twice,
    // #read, make and later moved to fields; the getter, count (arguments) and both name() (a
    // subclass) have no eager form; unused was never called.
    assertEquals(report, { expressions: 4, declarations: 2, methods: 4, left: 4 });
    assertOk(source.startsWith("var used=(function used(x)"), source);
    assertOk(source.includes("var helper=(function helper(x)"), source);
    assertOk(source.includes("function unused() { return 0; }"), source);
    assertOk(source.includes(".map(((v) => v * x))"), source);
    assertOk(source.includes("#read=(()=>{ return this.value; });"), source);
    assertOk(source.includes("twice(by){return this.#eager_twice(by)}"), source);
    // V8 compiles a parenthesised async arrow only when it is called: an async function, bound.
    assertOk(
      source.includes(
        "#eager_later=(async function(by = 3){ await null; return this.#n * by; }).bind(this);",
      ),
      source,
    );
    assertOk(source.includes("later(by = 3){return this.#eager_later(by)}"), source);
    await Deno.writeTextFile(`${dir}/eager.js`, source);
    assertEquals(await output(`${dir}/eager.js`), await output(`${dir}/lazy.js`));
    const lazily = (log: string, file: string, text: string) =>
      compiledRanges(log, file, "parse-function").map(([start, end]) => text.slice(start, end))
        .sort();
    // Compiled lazily before: every function called.
    assertEquals(lazily(before, "lazy.js", SAMPLE).length, 17);
    const after = await moduleLog(`${dir}/eager.js`);
    // After: the three classes' constructors (empty ranges), what has no eager form, and the
    // stubs of the public methods (a line each).
    assertEquals(lazily(after, "eager.js", source), [
      "",
      "",
      "",
      '() { return "base"; }',
      '() { return "derived " + super.name(); }',
      "() { return arguments.length; }",
      "() { return this.#n; }",
      "(){return this.#eager_make()}",
      "(by = 3){return this.#eager_later(by)}",
      "(by){return this.#eager_twice(by)}",
    ]);
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("dist/denit.js: a plain start compiles lazily only functions that have no eager form", async () => {
  const bundle = `${ROOT}dist/denit.js`;
  const log = await startLog(bundle);
  const lazy = compiledRanges(log, "denit.js", "parse-function");
  const all = compiledRanges(log, "denit.js");
  // What is compiled lazily is what has no eager form, the public methods' stubs, and what this
  // start took that the build's did not (on a loaded machine a start may take another path: one
  // method was seen). Without the step, 176 functions are markable.
  const { report } = markEager(await Deno.readTextFile(bundle), lazy);
  const markable = report.expressions + report.declarations + report.methods;
  assertOk(markable <= 10, JSON.stringify(report));
  assertOk(all.length > lazy.length + 100, `${all.length} compiled, ${lazy.length} lazily`);
});
