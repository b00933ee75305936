// The sidebar's card rows (labextension/lib/render.js, built from render.ts) for
// the clusters of card_rows.json, which raylab/display/render.py must make too. Run by
// test_card_wording.py with TZ=UTC: `node --test tests/packaging/card_rows.test.mjs`.
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import test from 'node:test';

const root = new URL('../../', import.meta.url);
const cases = JSON.parse(
  readFileSync(new URL('tests/packaging/card_rows.json', root), 'utf8')
);
// lib/ is compiled as ES modules; importing it by data URL ignores package.json's type.
const source = readFileSync(
  new URL('labextension/lib/render.js', root),
  'utf8'
);
const { cardFields } = await import(
  'data:text/javascript;base64,' + Buffer.from(source).toString('base64')
);

for (const c of cases) {
  test(c.case, () => {
    const options = { withOwner: c.owner ?? false };
    if (c.started !== undefined) {
      options.startedS = c.started;
    }
    assert.deepEqual(cardFields(c.cluster, c.now, options), c.rows);
  });
}
