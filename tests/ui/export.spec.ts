/**
 * The notebook toolbar's "Export to pipeline" button in a real JupyterLab and
 * real Chromium, against the real export API (`POST raylab/export`): it
 * writes a Dagster project beside the notebook. No Ray cluster is needed.
 */
import * as path from 'path';

import { expect, IJupyterLabPageFixture, test } from '@jupyterlab/galata';
import { Locator } from '@playwright/test';

import { searchPalette } from './palette';

test.describe.configure({ mode: 'serial' });

// As in sidebar.spec.ts: docs/images when RAYLAB_SCREENSHOTS says so.
const SHOTS =
  process.env.RAYLAB_SCREENSHOTS ??
  path.resolve(__dirname, '../../test-results/ui/screenshots');
const BUTTON = { name: 'Export to pipeline' };
const PALETTE_LABEL = 'Export Notebook to Pipeline';

async function toolbarOf(
  page: IJupyterLabPageFixture,
  notebook: string
): Promise<Locator> {
  const toolbar = await page.notebook.getToolbarLocator(notebook);
  if (!toolbar) {
    throw new Error(`no toolbar for ${notebook}`);
  }
  // The notebook's own buttons are there: the toolbar has been built.
  await expect(toolbar.getByRole('button', { name: /^Save/ })).toBeVisible();
  return toolbar;
}

/** A text file's content, through the contents API ('' when there is none). */
async function readText(
  page: IJupyterLabPageFixture,
  file: string
): Promise<string> {
  const url = `/api/contents/${file.split('/').map(encodeURIComponent).join('/')}`;
  const reply = await page.request.get(
    `${url}?type=file&format=text&content=1`
  );
  if (!reply.ok()) {
    return '';
  }
  const model = (await reply.json()) as { content?: unknown };
  return typeof model.content === 'string' ? model.content : '';
}

/** The command palette's item whose label is exactly `label`. */
function paletteItem(page: IJupyterLabPageFixture, label: string): Locator {
  const exact = new RegExp(`^${label.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')}$`);
  return page
    .locator('#command-palette .lm-CommandPalette-itemLabel')
    .filter({ hasText: exact });
}

async function paletteShows(
  page: IJupyterLabPageFixture,
  label: string
): Promise<boolean> {
  const palette = await searchPalette(page, label);
  // The search has applied once matches are highlighted or none is found.
  await expect(
    palette
      .locator('.lm-CommandPalette-item mark, .lm-CommandPalette-emptyMessage')
      .first()
  ).toBeVisible();
  const shown = await paletteItem(page, label).isVisible();
  await page.keyboard.press('Escape');
  return shown;
}

test('export a notebook, open its EXPORT.md, replace it when asked', async ({
  page,
  tmpPath
}) => {
  test.setTimeout(180_000);
  const out = `${tmpPath}/export_me_pipeline`;
  await page.notebook.createNew('export-me.ipynb');
  // Left unsaved on purpose: the button saves the notebook first.
  await page.notebook.setCell(0, 'code', 'n = 2\nanswer = n * 21\nanswer');
  const toolbar = await toolbarOf(page, 'export-me.ipynb');
  const button = toolbar.getByRole('button', BUTTON);
  await expect(button).toBeVisible();
  expect(await paletteShows(page, PALETTE_LABEL)).toBe(true);
  await toolbar.screenshot({ path: path.join(SHOTS, 'export-button.png') });
  await page.theme.setDarkTheme();
  await toolbar.screenshot({
    path: path.join(SHOTS, 'export-button-dark.png')
  });
  await page.theme.setLightTheme();

  // A slow answer, so that the progress can be seen (the server is real).
  await page.route('**/raylab/export', async route => {
    await new Promise(resolve => setTimeout(resolve, 1500));
    await route.continue();
  });
  await button.click();
  await expect(
    page.locator('.Toastify__toast', {
      hasText: 'Exporting export-me.ipynb to a Dagster pipeline'
    })
  ).toBeVisible();
  await expect(button).toBeDisabled();

  // The report opens in a tab, rendered, and the folder in the file browser.
  const reportTab = page.activity.getTabLocator('EXPORT.md');
  await expect(reportTab).toBeVisible({ timeout: 60_000 });
  const report = page.locator('.jp-MarkdownViewer:visible');
  await expect(report.locator('h1').first()).toContainText(
    'export_me: a Dagster pipeline from export-me.ipynb'
  );
  await expect(page.locator('.jp-FileBrowser .jp-BreadCrumbs')).toContainText(
    'export_me_pipeline'
  );
  await expect(
    page.locator('.jp-DirListing-itemText', { hasText: 'EXPORT.md' })
  ).toBeVisible();
  // The generated project, through the contents API; the unsaved cell was saved first.
  expect(await page.contents.fileExists(`${out}/EXPORT.md`)).toBe(true);
  expect(
    await page.contents.fileExists(`${out}/export_me/definitions.py`)
  ).toBe(true);
  expect(await readText(page, `${out}/export_me/notebook.py`)).toContain(
    'answer = n * 21'
  );

  // No cluster was named: the server warns, and the warning is one click away.
  const done = page.locator('.Toastify__toast', {
    hasText: 'Exported export-me.ipynb to export_me_pipeline, with 1 warning'
  });
  await expect(done).toBeVisible();
  await page.screenshot({ path: path.join(SHOTS, 'export-to-pipeline.png') });
  await done.getByRole('button', { name: 'Show warnings' }).click();
  const warnings = page.locator('.jp-Dialog-content');
  await expect(warnings).toContainText('no cluster connected');
  await warnings.getByRole('button', { name: 'Close' }).click();
  await expect(page.locator('.jp-Dialog')).toHaveCount(0);
  await page.unroute('**/raylab/export');

  // Again, after a change: the folder exists, so the button asks first.
  await page.activity.activateTab('export-me.ipynb');
  await page.notebook.setCell(0, 'code', 'n = 3\nanswer = n * 14\nanswer');
  await button.click();
  const ask = page.locator('.jp-Dialog-content');
  await expect(ask).toContainText('Replace the earlier export?');
  await expect(ask).toContainText(
    'The folder export_me_pipeline already exists: it holds an earlier export'
  );
  await ask.getByRole('button', { name: 'Cancel' }).click();
  await expect(page.locator('.jp-Dialog')).toHaveCount(0);
  expect(await readText(page, `${out}/export_me/notebook.py`)).toContain(
    'answer = n * 21'
  );

  // By keyboard this time: focus the button, Enter, then replace.
  await button.focus();
  await page.keyboard.press('Enter');
  await expect(ask).toContainText('Replace the earlier export?');
  await ask.screenshot({ path: path.join(SHOTS, 'export-replace-dialog.png') });
  await ask.getByRole('button', { name: 'Replace the earlier export' }).click();
  await expect(page.locator('.jp-Dialog')).toHaveCount(0);
  await expect
    .poll(() => readText(page, `${out}/export_me/notebook.py`), {
      timeout: 60_000
    })
    .toContain('answer = n * 14');
  await expect(reportTab).toBeVisible();
  await page.activity.activateTab('export-me.ipynb');
  await expect(button).toBeEnabled();
});

test('a notebook the server cannot export: its error and hint in a dialog', async ({
  page,
  tmpPath
}) => {
  await page.notebook.createNew('broken.ipynb');
  await page.notebook.setCell(0, 'code', 'x = (1,\n');
  const toolbar = await toolbarOf(page, 'broken.ipynb');
  await toolbar.getByRole('button', BUTTON).click();
  const dialog = page.locator('.jp-Dialog-content');
  await expect(dialog).toContainText('Could not export broken.ipynb');
  // The server's error (the cell and line) and its detail (what to do).
  await expect(dialog.getByRole('alert')).toContainText('cell 1, line');
  await expect(dialog).toContainText('fix the cell');
  await dialog.getByRole('button', { name: 'Close' }).click();
  await expect(page.locator('.jp-Dialog')).toHaveCount(0);
  expect(
    await page.contents.directoryExists(`${tmpPath}/broken_pipeline`)
  ).toBe(false);
});

test('from the palette with options: name, schedule, cells', async ({
  page,
  tmpPath
}) => {
  await page.notebook.createNew('Nightly Train.ipynb');
  await page.notebook.setCell(0, 'code', 'total = sum(range(10))\ntotal');
  await toolbarOf(page, 'Nightly Train.ipynb');

  const openOptions = async (): Promise<Locator> => {
    await searchPalette(page, `${PALETTE_LABEL} with Options`);
    await paletteItem(page, `${PALETTE_LABEL} with Options…`).click();
    const dialog = page.locator('.jp-Dialog-content');
    await expect(dialog).toContainText(
      'Export Nightly Train.ipynb to a pipeline'
    );
    // Keyboard users start typing in the first field.
    await expect(dialog.getByLabel('Pipeline name')).toBeFocused();
    return dialog;
  };
  let dialog = await openOptions();
  // The default name, as the server derives it, is the placeholder.
  await expect(dialog.getByLabel('Pipeline name')).toHaveAttribute(
    'placeholder',
    'nightly_train'
  );
  await dialog.getByLabel('Pipeline name').fill('nightly');
  await dialog.getByLabel('Schedule (cron, UTC)').fill('every day');
  await dialog.getByLabel('Cells').selectOption('all');
  await expect(dialog.getByLabel('Pipeline name')).toHaveValue('nightly');
  await expect(dialog.getByLabel('Schedule (cron, UTC)')).toHaveValue(
    'every day'
  );
  await dialog.screenshot({
    path: path.join(SHOTS, 'export-options-dialog.png')
  });
  await dialog.getByRole('button', { name: 'Export' }).click();
  // The server refuses the schedule; its message names the field.
  const error = page.locator('.jp-Dialog-content');
  await expect(error).toContainText('Could not export Nightly Train.ipynb');
  await expect(error.getByRole('alert')).toContainText(
    "schedule: 'every day' is not a cron schedule"
  );
  await error.getByRole('button', { name: 'Close' }).click();

  dialog = await openOptions();
  await dialog.getByLabel('Pipeline name').fill('nightly');
  await dialog.getByLabel('Schedule (cron, UTC)').fill('@daily');
  await dialog.getByRole('button', { name: 'Export' }).click();
  await expect(page.activity.getTabLocator('EXPORT.md')).toBeVisible({
    timeout: 60_000
  });
  const out = `${tmpPath}/nightly_pipeline`;
  expect(await page.contents.fileExists(`${out}/nightly/definitions.py`)).toBe(
    true
  );
  expect(await readText(page, `${out}/EXPORT.md`)).toContain('`@daily`');
});

test('a server without the export API: no button, no palette entry', async ({
  page
}) => {
  // The real profiles reply without its `features` list, as a server from
  // before the export API sends it (the page adds a cache-busting query).
  const profiles = '**/raylab/profiles?*';
  await page.route(profiles, async route => {
    const response = await route.fetch();
    const body = (await response.json()) as Record<string, unknown>;
    delete body.features;
    await route.fulfill({ response, json: body });
  });
  const decided = page.waitForEvent('console', {
    predicate: message =>
      message.text().includes('this server has no pipeline export'),
    timeout: 60_000
  });
  await page.reload();
  await page.waitForSelector('#jupyterlab-splash', { state: 'detached' });
  await decided;

  await page.notebook.createNew('no-export.ipynb');
  const toolbar = await toolbarOf(page, 'no-export.ipynb');
  await expect(toolbar.getByRole('button', BUTTON)).toHaveCount(0);
  expect(await paletteShows(page, PALETTE_LABEL)).toBe(false);
  await page.unroute(profiles);
});
