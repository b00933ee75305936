// Import cycles among the labextension's modules, type-only imports included (a
// circle through a type still ties the two files together). Run by `npm run
// lint:check`: `node labextension/import-cycles.mjs [folder]`.
import { existsSync, readFileSync, readdirSync } from 'node:fs';
import { dirname, join, relative, resolve } from 'node:path';

import ts from 'typescript';

const root = resolve(process.argv[2] ?? 'labextension/src');
const files = readdirSync(root, { recursive: true })
  .filter(f => /\.tsx?$/.test(f) && !f.endsWith('.d.ts'))
  .map(f => join(root, f));

/** The module file a relative import names; null for a package. */
function target(from, name) {
  if (!name.startsWith('.')) {
    return null;
  }
  const base = resolve(dirname(from), name);
  const candidates = ['.ts', '.tsx', '/index.ts', '/index.tsx'].map(
    ending => base + ending
  );
  return candidates.find(f => existsSync(f)) ?? null;
}

const imports = new Map(
  files.map(file => [
    file,
    ts
      .preProcessFile(readFileSync(file, 'utf8'), true, true)
      .importedFiles.map(i => target(file, i.fileName))
      .filter(f => f !== null)
  ])
);

// Depth first: an import of a module still open on the path closes a cycle.
const open = [];
const seen = new Set();
const cycles = [];
function visit(file) {
  seen.add(file);
  open.push(file);
  for (const next of imports.get(file) ?? []) {
    if (open.includes(next)) {
      cycles.push([...open.slice(open.indexOf(next)), next]);
    } else if (!seen.has(next)) {
      visit(next);
    }
  }
  open.pop();
}
files.forEach(file => seen.has(file) || visit(file));

for (const cycle of cycles) {
  console.error(
    `import cycle: ${cycle.map(f => relative(root, f)).join(' > ')}`
  );
}
if (cycles.length > 0) {
  process.exit(1);
}
console.log(
  `no import cycle among the ${files.length} modules of ${relative('.', root)}`
);
