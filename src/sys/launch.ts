/**
 * What the entry and the supervising program take from sys/process.ts under denit's launcher
 * (launch/denit.c), each by a dynamic import. A module of its own because the bundle gives a
 * dynamically imported module a namespace object, built while the bundle loads, with a getter
 * for each export: four here, where process.ts has 27.
 */

export { closeDescriptor, moveDescriptor, setEnvironment, unblockSignals } from "./process.ts";
