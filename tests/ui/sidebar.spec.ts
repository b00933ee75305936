/**
 * The "Ray clusters" sidebar in a real JupyterLab, real Chromium, real Ray
 * (local backend). Serial: the tests share one server and its state folder.
 */
import * as path from 'path';

import { expect, IJupyterLabPageFixture, test } from '@jupyterlab/galata';
import { Locator } from '@playwright/test';

import { searchPalette } from './palette';

test.describe.configure({ mode: 'serial' });

// A cluster is Ready in ~20 s on an idle 2-core machine; allow for a busy one.
const READY_TIMEOUT = Number(process.env.RAYLAB_UI_READY_TIMEOUT_MS ?? 180_000);
// Screenshots for the README go to docs/images when RAYLAB_SCREENSHOTS says so
// (so that a test run leaves the work tree clean); else next to the results.
const SHOTS =
  process.env.RAYLAB_SCREENSHOTS ??
  path.resolve(__dirname, '../../test-results/ui/screenshots');

function shot(name: string): string {
  return path.join(SHOTS, name);
}

async function openSidebar(page: IJupyterLabPageFixture): Promise<Locator> {
  const panel = page.locator('#raylab-clusters');
  if (!(await panel.isVisible())) {
    await page.locator('.jp-SideBar [data-id="raylab-clusters"]').click();
  }
  await expect(panel).toBeVisible();
  return panel;
}

function card(page: IJupyterLabPageFixture, name: string): Locator {
  return page.locator(
    `#raylab-clusters li.jp-raylab-card[data-cluster="${name}"]`
  );
}

async function openNewClusterDialog(
  page: IJupyterLabPageFixture
): Promise<Locator> {
  const panel = await openSidebar(page);
  // The button of the panel's JupyterLab toolbar (the empty state has one too).
  await panel
    .locator('.jp-SidePanel-toolbar')
    .getByRole('button', { name: 'New cluster' })
    .click();
  const dialog = page.locator('.jp-Dialog-content');
  await expect(dialog.getByText('New Ray cluster')).toBeVisible();
  await expect(dialog.locator('.jp-raylab-quota')).toContainText('Your quota');
  return dialog;
}

async function fill(
  dialog: Locator,
  field: string,
  value: string
): Promise<void> {
  await dialog.locator(`#jp-raylab-new-${field}`).fill(value);
}

async function deleteFromCard(
  page: IJupyterLabPageFixture,
  name: string
): Promise<void> {
  await card(page, name)
    .getByRole('button', { name: `Delete ${name}` })
    .click();
  const confirm = page.locator('.jp-Dialog-content');
  await expect(confirm).toContainText(`Delete cluster ${name}?`);
  await confirm.getByRole('button', { name: `Delete cluster ${name}` }).click();
  await expect(card(page, name)).toHaveCount(0, { timeout: 60_000 });
}

/**
 * Put `source` in the active notebook's active cell as it is (typing it, as
 * `setCell` does, would indent it again).
 */
async function setActiveCellSource(
  page: IJupyterLabPageFixture,
  source: string
): Promise<void> {
  await page.evaluate(text => {
    interface ICellPanel {
      content: {
        activeCell: { model: { sharedModel: { setSource(s: string): void } } };
      };
    }
    const galata = (
      window as unknown as {
        galata: { app: { shell: { currentWidget: unknown } } };
      }
    ).galata;
    const panel = galata.app.shell.currentWidget as ICellPanel;
    panel.content.activeCell.model.sharedModel.setSource(text);
  }, source);
}

test('empty state, and the server refusals shown next to their field', async ({
  page
}) => {
  const panel = await openSidebar(page);
  await expect(panel.locator('.jp-raylab-empty')).toContainText(
    'You have no Ray clusters'
  );

  // The command palette lists the same actions.
  const palette = await searchPalette(page, 'Ray cluster');
  await expect(palette.getByText('New Ray Cluster…')).toBeVisible();
  await expect(palette.getByText('Delete Ray Cluster…')).toBeVisible();
  await page.keyboard.press('Escape');

  const dialog = await openNewClusterDialog(page);
  // The server runs with max_gpus_per_user = 2.
  await expect(dialog.locator('.jp-raylab-quota')).toContainText(
    '2 of 2 GPUs left'
  );
  await dialog.locator('#jp-raylab-new-gpu_type').selectOption('a100');
  await fill(dialog, 'gpus', '4');
  await fill(dialog, 'workers', '1');
  await dialog.getByRole('button', { name: 'Create the cluster' }).click();
  const gpusField = dialog.locator('.jp-raylab-field[data-field="gpus"]');
  await expect(gpusField.locator('.jp-raylab-field-error')).toHaveText(
    /4 GPUs requested, quota is 2 and 0 are in use/
  );
  await expect(dialog.locator('#jp-raylab-new-gpus')).toHaveAttribute(
    'aria-invalid',
    'true'
  );

  // A validation error (422) names its field: the name.
  await fill(dialog, 'gpus', '2');
  await fill(dialog, 'name', 'Bad_Name');
  await dialog.getByRole('button', { name: 'Create the cluster' }).click();
  await expect(
    dialog.locator('.jp-raylab-field[data-field="name"] .jp-raylab-field-error')
  ).toContainText('is not a valid name');
  // Uneven split: 3 GPUs over 2 workers.
  await fill(dialog, 'name', '');
  await fill(dialog, 'gpus', '3');
  await fill(dialog, 'workers', '2');
  await dialog.getByRole('button', { name: 'Create the cluster' }).click();
  await expect(
    dialog.locator('.jp-raylab-field[data-field="gpus"] .jp-raylab-field-error')
  ).toContainText('cannot be split evenly across 2 workers');
  await fill(dialog, 'gpus', '4');
  await fill(dialog, 'workers', '1');
  await dialog.getByRole('button', { name: 'Create the cluster' }).click();
  await expect(gpusField.locator('.jp-raylab-field-error')).toBeVisible();
  await dialog.screenshot({ path: shot('new-cluster-dialog.png') });
  await dialog.getByRole('button', { name: 'Cancel' }).click();
  await expect(page.locator('.jp-Dialog')).toHaveCount(0);
  await expect(panel.locator('.jp-raylab-card')).toHaveCount(0);
});

test('on a busy browser, what the user types stays in the field they type in', async ({
  page
}) => {
  // JupyterLab focuses a React dialog's field when the browser is next idle;
  // on a busy machine that comes late, after the user has moved on to another
  // field (a first hub journey on a loaded CI machine typed its `gpus` into
  // the name). Here the page's idle callbacks come 1.5 s late, and the test
  // waits until the late ones have run.
  await page.evaluate(() => {
    const w = window as unknown as {
      requestIdleCallback: typeof requestIdleCallback;
      raylabLateIdle: number;
    };
    const idle = w.requestIdleCallback.bind(w);
    w.raylabLateIdle = 0;
    w.requestIdleCallback = (callback, options) => {
      w.raylabLateIdle += 1;
      return idle(
        deadline =>
          setTimeout(() => {
            w.raylabLateIdle -= 1;
            callback(deadline);
          }, 1500),
        options
      );
    };
  });
  const dialog = await openNewClusterDialog(page);
  const name = dialog.locator('#jp-raylab-new-name');
  const gpus = dialog.locator('#jp-raylab-new-gpus');
  // The name field has the focus as soon as the dialog shows (not only once
  // the browser is idle): the user types the name at once.
  expect(await page.evaluate(() => document.activeElement?.id)).toBe(
    'jp-raylab-new-name'
  );
  await page.keyboard.type('alice-exp');
  await gpus.focus();
  await page.waitForFunction(
    () => (window as unknown as { raylabLateIdle: number }).raylabLateIdle === 0
  );
  await page.keyboard.press('Control+A');
  await page.keyboard.type('2');
  await expect(gpus).toBeFocused();
  await expect(name).toHaveValue('alice-exp');
  await expect(gpus).toHaveValue('2');
  await dialog.getByRole('button', { name: 'Cancel' }).click();
  await expect(page.locator('.jp-Dialog')).toHaveCount(0);
});

test('a failing event stream is a banner, and recovers', async ({ page }) => {
  // The server's event stream fails (as when the server extension errors);
  // the route is Playwright's, the sidebar and the rest of the server are real.
  const events = '**/raylab/events*';
  await page.route(events, route =>
    route.fulfill({
      status: 500,
      contentType: 'application/json',
      body: JSON.stringify({
        error: 'internal error',
        detail: 'see the Jupyter server log'
      })
    })
  );
  await page.reload();
  await page.waitForSelector('#jupyterlab-splash', { state: 'detached' });
  const panel = await openSidebar(page);
  const banner = panel.locator('.jp-raylab-banner-error');
  await expect(banner).toContainText(
    'No live connection to the Jupyter server'
  );
  await expect(banner).toContainText('internal error');
  await expect(banner).toContainText(/Retrying/);
  await expect(banner).toHaveAttribute('role', 'alert');

  await page.unroute(events);
  await banner.getByRole('button', { name: 'Retry now' }).click();
  await expect(banner).toHaveCount(0);
  await expect(panel.locator('.jp-raylab-empty')).toBeVisible();
});

test('create in the dialog, connect a notebook, run Ray on it, delete', async ({
  page
}) => {
  test.setTimeout(420_000);
  await page.notebook.createNew('journey.ipynb');

  const dialog = await openNewClusterDialog(page);
  await fill(dialog, 'name', 'ui-journey');
  await dialog.locator('#jp-raylab-new-gpu_type').selectOption('a100');
  await fill(dialog, 'gpus', '1');
  await fill(dialog, 'workers', '1');
  await fill(dialog, 'cpus', '1');
  await fill(dialog, 'memory', '1Gi');
  await dialog.getByRole('button', { name: 'Create the cluster' }).click();
  await expect(page.locator('.jp-Dialog')).toHaveCount(0);

  const c = card(page, 'ui-journey');
  await expect(c).toBeVisible();
  await expect(c).toContainText('1 × a100');
  await expect(c).toContainText('1 CPU · 1Gi memory');
  await expect(c).toHaveAttribute('data-phase', 'Ready', {
    timeout: READY_TIMEOUT
  });
  await expect(c).toContainText('1/1 ready');
  await expect(c).toContainText('(logical)');
  // The notebook card's rows (`cardFields`), less the phase shown in the header,
  // and less GPU use: its worker's FAKE GPUs (test_browser.py) are read on the
  // culler's clock, so that row comes when it comes (its own test checks it).
  await expect(
    c.locator('.jp-raylab-card-fields dt').filter({ hasNotText: /^GPU use$/ })
  ).toHaveText(['Workers', 'GPUs', 'Per worker', 'Age', 'Ray', 'Connection']);
  // A local cluster: the notebook's kernel drives it directly, at its GCS.
  await expect(c.locator('.jp-raylab-card-fields')).toContainText(
    'Ray driver at 127.0.0.1:'
  );

  await c
    .getByRole('button', { name: 'Connect notebook to ui-journey' })
    .click();
  // The magic's own words, or its error, in a notification.
  await expect(page.locator('.Toastify__toast').first()).toContainText(
    'Connected this kernel to ui-journey',
    { timeout: 90_000 }
  );

  await page.notebook.setCell(0, 'code', 'import ray\nray.cluster_resources()');
  await page.notebook.runCell(0);
  const output = (await page.notebook.getCellTextOutput(0))?.join('\n') ?? '';
  expect(output).toMatch(/'GPU': 1\.0/);
  expect(output).toMatch(/'CPU': \d+\.0/);

  // Copy connect code: the code reaches the clipboard, a notification says so.
  await c
    .getByRole('button', { name: 'Copy code that connects to ui-journey' })
    .click();
  await expect(
    page.locator('.Toastify__toast').filter({
      hasText: 'Copied the code that connects a notebook to ui-journey'
    })
  ).toBeVisible();

  // Scale: the server's refusal shows next to the field; nothing changes.
  await c.getByRole('button', { name: 'Scale ui-journey' }).click();
  const scale = page.locator('.jp-Dialog-content');
  await scale.locator('#jp-raylab-scale-workers').fill('0');
  await scale.getByRole('button', { name: 'Scale' }).click();
  await expect(scale.locator('.jp-raylab-field-error')).toContainText(
    'needs at least one worker'
  );
  await scale.getByRole('button', { name: 'Cancel' }).click();
  await expect(page.locator('.jp-Dialog')).toHaveCount(0);

  // The head's log in a panel.
  await c.getByRole('button', { name: 'Show the log of ui-journey' }).click();
  const logs = page.locator('.jp-raylab-logs');
  await expect(logs.locator('pre')).toContainText('Ray runtime started');

  // The Ray dashboard in a tab, through the server's authenticated proxy.
  await c
    .getByRole('button', { name: 'Open the Ray dashboard of ui-journey' })
    .click();
  const frame = page.locator('.jp-raylab-dashboard');
  await expect(frame).toBeVisible();
  await expect
    .poll(
      async () =>
        page
          .frames()
          .find(f => f.url().includes('/raylab/clusters/ui-journey/dashboard/'))
          ?.title() ?? '',
      { timeout: 30_000 }
    )
    .toMatch(/Ray/);
  // The cluster checks a token, which the proxy adds: the dashboard's own API calls
  // succeed and it never asks the browser for the token.
  const dashboard = page
    .frames()
    .find(f => f.url().includes('/raylab/clusters/ui-journey/dashboard/'))!;
  await dashboard.waitForLoadState('networkidle');
  await expect(
    dashboard.getByText('Authentication Token Required')
  ).toHaveCount(0);
  // Sandboxed (an opaque origin: none of Jupyter's cookies or API), yet the app
  // renders and its API calls, which carry the key in their URL, get data ("No
  // data loaded" until one does).
  expect(await dashboard.evaluate(() => window.origin)).toBe('null');
  await expect(dashboard.getByText(/^Updated /)).toBeVisible();

  // A cell as a Ray job: its log streams into the cell, its value comes back.
  // It sleeps for longer than the sidebar's 5 s poll, which must see it run.
  await page.notebook.activate('journey.ipynb');
  await page.notebook.addCell(
    'code',
    '%%raycluster job uijob\nimport time\ntime.sleep(8)\nprint("hello from the job")\n6 * 7'
  );
  // Running the first cell left an empty one below it: the job's cell is the last.
  const jobCell = (await page.notebook.getCellCount()) - 1;
  await page.notebook.runCell(jobCell, { wait: false });
  const jobs = c.getByRole('region', { name: 'Jobs on ui-journey' });
  const job = jobs.locator('li[data-job="uijob"]');
  const jobButton = job.getByRole('button', {
    name: 'Show the log of job uijob'
  });
  await expect(jobButton).toHaveText('uijob', { timeout: 90_000 });
  await expect(job.locator('.jp-raylab-job-state')).toHaveText('Running', {
    timeout: 60_000
  });
  await page.notebook.waitForRun(jobCell);
  // The sidebar's next poll sees it ended, and says so wherever the user is.
  const done = page
    .locator('.Toastify__toast')
    .filter({ hasText: 'Job uijob on ui-journey succeeded' });
  await expect(done).toBeVisible({ timeout: 30_000 });
  const jobOutput =
    (await page.notebook.getCellTextOutput(jobCell))?.join('\n') ?? '';
  expect(jobOutput).toContain('hello from the job');
  expect(jobOutput).toMatch(/^42$/m);
  await expect(job.locator('.jp-raylab-job-state')).toHaveText('Succeeded');
  await expect(job.locator('.jp-raylab-job-duration')).toHaveText(
    /^(\d+ min )?\d+ s$/
  );

  // The notification's Show log opens the job's whole log in a panel.
  await done.getByRole('button', { name: 'Show log' }).click();
  const jobTab = page
    .locator('.lm-DockPanel-tabBar .lm-TabBar-tab')
    .filter({ hasText: 'Ray job: uijob (ui-journey)' });
  await expect(jobTab).toBeVisible();
  const jobLog = page
    .locator('.jp-raylab-logs')
    .filter({ has: page.getByLabel('Log of job uijob on ui-journey') });
  await expect(jobLog.locator('pre')).toContainText('hello from the job');
  await jobTab.locator('.lm-TabBar-tabCloseIcon').click();
  await expect(jobTab).toHaveCount(0);
  // So does the job's name on the card.
  await jobButton.click();
  await expect(jobTab).toBeVisible();
  await expect(jobLog.locator('.jp-raylab-logs-status')).toContainText(
    /^Log of job uijob, as of /
  );
  await expect(jobLog.locator('pre')).toContainText('hello from the job');

  const sidebar = page.locator('#raylab-clusters');
  const content = sidebar.locator('.jp-raylab-panel');
  await content.screenshot({ path: shot('sidebar.png') });
  await page.theme.setDarkTheme();
  await content.screenshot({ path: shot('sidebar-dark.png') });
  await page.theme.setLightTheme();

  await deleteFromCard(page, 'ui-journey');
  await expect(sidebar.locator('.jp-raylab-empty')).toBeVisible();
});

test('a cluster made by %raycluster up in a notebook appears live', async ({
  page
}) => {
  test.setTimeout(300_000);
  await page.notebook.createNew('made-in-notebook.ipynb');
  const panel = await openSidebar(page);
  await expect(panel.locator('.jp-raylab-empty')).toBeVisible();

  await page.notebook.setCell(
    0,
    'code',
    '%load_ext raylab\n%raycluster up --name nb-made --workers 0 --cpus 1'
  );
  // Run without waiting: the card must show up while the magic still waits.
  const running = page.notebook.runCell(0);
  const c = card(page, 'nb-made');
  await expect(c).toBeVisible({ timeout: 60_000 });
  await expect(c).toHaveAttribute('data-phase', 'Ready', {
    timeout: READY_TIMEOUT
  });
  await running;
  await expect(c).toContainText('0/0 ready');

  // Admins (this server makes the test user one) switch to everyone's clusters:
  // the overview, one sortable row per cluster with its owner and GPU-hours.
  await panel.getByRole('radio', { name: 'All users' }).check();
  const overview = panel.getByRole('table', { name: "Every user's clusters" });
  await expect(overview).toBeVisible();
  const row = overview.locator('tr[data-cluster="nb-made"]');
  await expect(row).toContainText('Ready');
  await expect(row).toContainText('GPU-h');
  await expect(
    overview.getByRole('columnheader', { name: 'Owner' })
  ).toBeVisible();
  // The local backend has no namespaces: no Namespace column. Each row has its
  // actions (the dashboard too: this server proxies it).
  await expect(
    overview.getByRole('columnheader', { name: 'Namespace' })
  ).toHaveCount(0);
  await expect(row).not.toHaveAttribute('data-namespace', /.*/);
  for (const action of [
    'Open the Ray dashboard of nb-made',
    'Show the log of nb-made',
    'Suspend nb-made',
    'Delete nb-made'
  ]) {
    await expect(row.getByRole('button', { name: action })).toBeVisible();
  }
  await overview.getByRole('button', { name: 'Cluster' }).click();
  await expect(
    overview.getByRole('columnheader', { name: 'Cluster' })
  ).toHaveAttribute('aria-sort', 'descending');
  await expect(panel.locator('.jp-raylab-usage')).toContainText(
    'All users this week:'
  );
  await panel.getByRole('radio', { name: 'Mine' }).check();
  await expect(c).toBeVisible();
  await expect(panel.locator('.jp-raylab-usage')).toContainText('This week:');

  // Suspend stops its processes and keeps the definition; the card offers Resume.
  await c.getByRole('button', { name: 'Suspend nb-made' }).click();
  await expect(c).toHaveAttribute('data-phase', 'Suspended', {
    timeout: 60_000
  });
  await expect(c.getByRole('button', { name: 'Resume nb-made' })).toBeVisible();
  await deleteFromCard(page, 'nb-made');
});

test("a cluster's GPU use: figures, the last hour's line, the overview's counts", async ({
  page
}) => {
  test.setTimeout(300_000);
  // test_browser.py gives every cluster's worker-1 two FAKE GPUs (a fake NVML
  // that Ray's reporter reads): one at 87 %, one at 2 %. The server's culler
  // reads them every 2 s.
  const dialog = await openNewClusterDialog(page);
  await fill(dialog, 'name', 'ui-gpu');
  await dialog.locator('#jp-raylab-new-gpu_type').selectOption('a100');
  await fill(dialog, 'gpus', '2');
  await fill(dialog, 'workers', '1');
  await fill(dialog, 'cpus', '1');
  await fill(dialog, 'memory', '1Gi');
  await dialog.getByRole('button', { name: 'Create the cluster' }).click();
  await expect(page.locator('.jp-Dialog')).toHaveCount(0);

  const c = card(page, 'ui-gpu');
  await expect(c).toHaveAttribute('data-phase', 'Ready', {
    timeout: READY_TIMEOUT
  });
  // The row comes right after GPUs once the server read the cluster, and shows
  // figures once its GPUs were measured.
  const fields = c.locator('.jp-raylab-card-fields');
  await expect
    .poll(
      async () => {
        const keys = await fields.locator('dt').allTextContents();
        return keys[keys.indexOf('GPUs') + 1];
      },
      { timeout: 60_000 }
    )
    .toBe('GPU use');
  const use = fields.locator('dd.jp-raylab-gpu-use');
  await expect(use.locator('span')).toHaveText(
    /^\d+% · \d+\/\d+ GiB · \d of \d busy$/,
    { timeout: 60_000 }
  );
  // Two readings make a line: the last hour, its latest value in its title.
  const line = use.getByRole('img', { name: 'GPU use, last hour' });
  await expect(line).toBeVisible({ timeout: 30_000 });
  await expect(line).toHaveClass('jp-raylab-gpu-sparkline');
  await expect(line.locator('polyline')).toHaveAttribute(
    'points',
    /^[\d.]+,[\d.]+( [\d.]+,[\d.]+)+$/
  );
  await expect(line.locator('title')).toHaveText(/^GPU use \d+% at \d\d:\d\d$/);

  // Opening the sidebar again opens the card: its GPU use is read now (not at
  // the culler's next sweep), once, and the reading comes back measured.
  await page.locator('.jp-SideBar [data-id="filebrowser"]').click();
  await expect(page.locator('#raylab-clusters')).toBeHidden();
  const reads: string[] = [];
  page.on('request', r => {
    if (r.url().includes('/gpu-use')) {
      reads.push(r.url());
    }
  });
  // (JupyterLab adds a cache-busting query to each GET.)
  const read = page.waitForResponse(r =>
    new URL(r.url()).pathname.endsWith('/raylab/clusters/ui-gpu/gpu-use')
  );
  await openSidebar(page);
  const reply = await read;
  expect(reply.status()).toBe(200);
  const body = (await reply.json()) as { gpu_use: { state: string } };
  expect(body.gpu_use.state).toBe('measured');
  await page.waitForTimeout(1000);
  expect(reads).toHaveLength(1);

  // The overview: one GPU busy (87 % is above the 5 % threshold), one idle, and
  // the same for its owner, whose only cluster it is.
  const panel = await openSidebar(page);
  await panel.getByRole('radio', { name: 'All users' }).check();
  const overview = panel.getByRole('table', { name: "Every user's clusters" });
  const row = overview.locator('tr[data-cluster="ui-gpu"]');
  // Owner, Cluster, GPUs, GPUs used, Idle GPUs (no Namespace on the local backend).
  await expect(row.locator('td').nth(3)).toHaveText('1');
  await expect(row.locator('td').nth(4)).toHaveText('1');
  const users = panel.getByRole('table', { name: 'GPUs by user' });
  await expect(users.locator('tbody tr')).toHaveCount(1);
  // User, GPUs held, Used, Idle, Clusters not measured.
  await expect(users.locator('tbody tr td').nth(1)).toHaveText('2');
  await expect(users.locator('tbody tr td').nth(2)).toHaveText('1');
  await expect(users.locator('tbody tr td').nth(3)).toHaveText('1');
  await expect(users.locator('tbody tr td').nth(4)).toHaveText('0');
  await panel.getByRole('radio', { name: 'Mine' }).check();

  await deleteFromCard(page, 'ui-gpu');
});

test("a cluster's Serve apps: listed on its opened card, opened through Jupyter", async ({
  page,
  baseURL
}) => {
  test.setTimeout(420_000);
  await page.notebook.createNew('serve.ipynb');
  const panel = await openSidebar(page);
  await expect(panel.locator('.jp-raylab-empty')).toBeVisible();

  // The card is open (the sidebar shown) when the cluster becomes Ready: it
  // reads the cluster's apps at once, then every few seconds while open.
  const reads: { status: number; state: string; why: string }[] = [];
  page.on('response', async r => {
    if (new URL(r.url()).pathname.endsWith('/raylab/clusters/ui-serve/apps')) {
      const body = (await r.json().catch(() => ({}))) as {
        serve?: { state: string; why: string };
      };
      reads.push({
        status: r.status(),
        state: body.serve?.state ?? '',
        why: body.serve?.why ?? ''
      });
    }
  });
  await page.notebook.setCell(
    0,
    'code',
    '%load_ext raylab\n%raycluster up --name ui-serve --workers 0 --cpus 1'
  );
  await page.notebook.runCell(0);
  const c = card(page, 'ui-serve');
  await expect(c).toHaveAttribute('data-phase', 'Ready', {
    timeout: READY_TIMEOUT
  });
  // Serve was never started there: no Serve row, no list.
  await expect
    .poll(() => reads.some(r => r.status === 200 && r.state === 'none'), {
      timeout: 60_000
    })
    .toBe(true);
  console.log(`apps reads before Serve: ${JSON.stringify(reads)}`);
  const fields = c.locator('.jp-raylab-card-fields');
  await expect(fields.locator('dt', { hasText: /^Serve$/ })).toHaveCount(0);
  const apps = c.getByRole('region', { name: 'Serve apps on ui-serve' });
  await expect(apps).toHaveCount(0);

  // Two apps from the connected kernel: one at /hello, one without a route
  // (reached through its handle only). serve.run returns once each runs.
  await page.notebook.addCell('code', '# Serve');
  await setActiveCellSource(
    page,
    [
      'from ray import serve',
      '',
      '@serve.deployment(ray_actor_options={"num_cpus": 0.25})',
      'class Hello:',
      '    def __call__(self, request) -> str:',
      '        return "hello from ui-serve"',
      '',
      'serve.run(Hello.bind(), name="hello", route_prefix="/hello")',
      'serve.run(Hello.bind(), name="handles", route_prefix=None)',
      'print("deployed")'
    ].join('\n')
  );
  const serveCell = (await page.notebook.getCellCount()) - 1;
  await page.notebook.runCell(serveCell);
  const served = (await page.notebook.getCellTextOutput(serveCell)) ?? [];
  expect(served.join('\n')).toMatch(/^deployed$/m);

  // The open card reads them again on its own (every few seconds): the list,
  // and the Serve row in the same words as the notebook's card.
  const hello = apps.locator('li[data-app="hello"]');
  await expect(hello).toHaveAttribute('data-status', 'RUNNING', {
    timeout: 60_000
  });
  await expect(hello.locator('.jp-raylab-serve-app-state')).toHaveText(
    'Running'
  );
  await expect(hello.locator('.jp-raylab-serve-app-route')).toHaveText(
    '/hello'
  );
  await expect(hello.locator('.jp-raylab-serve-app-replicas')).toHaveText(
    '1/1'
  );
  const handles = apps.locator('li[data-app="handles"]');
  await expect(handles).toHaveAttribute('data-status', 'RUNNING');
  await expect(handles.locator('.jp-raylab-serve-app-route')).toHaveText(
    'no route'
  );
  await expect(handles.getByRole('button')).toHaveCount(0);
  await expect(
    fields
      .locator('dt', { hasText: /^Serve$/ })
      .locator('xpath=following-sibling::dd[1]')
  ).toHaveText('2 apps · 2 running');

  await c.screenshot({ path: shot('serve-apps.png') });

  // Open: a new tab at the app's path below Jupyter, where the app answers
  // (the server sends a browser's navigation on to a key for this cluster).
  const url = `${baseURL}/raylab/clusters/ui-serve/serve/hello`;
  const [tab] = await Promise.all([
    page.context().waitForEvent('page'),
    hello
      .getByRole('button', { name: 'Open Serve app hello in a new tab' })
      .click()
  ]);
  await tab.waitForLoadState();
  expect(tab.url()).toMatch(
    /\/raylab\/clusters\/ui-serve\/serve\/(~[\w-]+\/)?hello$/
  );
  expect(tab.url().startsWith(`${baseURL}/raylab/clusters/`)).toBe(true);
  await expect(tab.locator('body')).toHaveText('hello from ui-serve');
  await tab.close();

  // Copy URL: that absolute URL, said in a notification.
  await hello
    .getByRole('button', { name: 'Copy the URL of Serve app hello' })
    .click();
  await expect(
    page.locator('.Toastify__toast').filter({
      hasText: `Copied the URL of Serve app hello: ${url}`
    })
  ).toBeVisible();

  await deleteFromCard(page, 'ui-serve');
});
