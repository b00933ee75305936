/**
 * Users of a real JupyterHub in real Chromium: they log in on the hub's login
 * page, and the hub's proxy brings them to their own JupyterLab with raylab.
 * Run one test at a time by test_hub.py (--grep), which deploys the hub, holds
 * the Kubernetes side and does between tests what a hub admin would do.
 */
import {
  Browser,
  BrowserContext,
  expect,
  Locator,
  Page,
  test
} from '@playwright/test';

const HUB = process.env.RAYLAB_HUB_URL ?? 'http://127.0.0.1:8000';
const PASSWORD = process.env.RAYLAB_HUB_PASSWORD ?? '';
const ADMIN_PASSWORD = process.env.RAYLAB_HUB_ADMIN_PASSWORD ?? '';
const CLUSTER = process.env.RAYLAB_HUB_CLUSTER ?? 'alice-exp';
const READY_TIMEOUT = 300_000;

interface IUser {
  context: BrowserContext;
  page: Page;
  name: string;
}

/**
 * Log in on the hub's own page; the hub starts the server and opens Lab. Lab
 * opens with a fresh layout (`?reset`), not the one saved on an earlier visit:
 * a notebook restored from there, its kernel gone with the server, would ask
 * for a kernel in a dialog that covers the sidebar. What the sidebar shows
 * comes from raylab, whatever the layout.
 */
async function login(
  browser: Browser,
  name: string,
  password = PASSWORD
): Promise<IUser> {
  const context = await browser.newContext();
  const page = await context.newPage();
  await page.goto(`${HUB}/hub/login`);
  await page.locator('#username_input').fill(name);
  await page.locator('#password_input').fill(password);
  await page.locator('#login_submit').click();
  await page.waitForURL(new RegExp(`/user/${name}/lab`), { timeout: 240_000 });
  await page.goto(`${HUB}/user/${name}/lab?reset`);
  await labReady(page);
  return { context, page, name };
}

/** Until Lab has started and restored its layout, and its splash is gone. */
async function labReady(page: Page): Promise<void> {
  type Lab = { jupyterapp?: { restored: Promise<void> } };
  await page.waitForFunction(() => !!(window as unknown as Lab).jupyterapp, {
    timeout: 120_000
  });
  await page.evaluate(() => (window as unknown as Lab).jupyterapp?.restored);
  await page.waitForSelector('#jupyterlab-splash', {
    state: 'detached',
    timeout: 120_000
  });
}

/** Open raylab's sidebar unless open: its tab toggles it, so look only once
 * Lab has restored its layout (which may open it). */
async function openSidebar(page: Page): Promise<Locator> {
  await labReady(page);
  const panel = page.locator('#raylab-clusters');
  if (!(await panel.isVisible())) {
    await page.locator('.jp-SideBar [data-id="raylab-clusters"]').click();
  }
  await expect(panel).toBeVisible();
  return panel;
}

function card(page: Page, name: string): Locator {
  return page.locator(
    `#raylab-clusters li.jp-raylab-card[data-cluster="${name}"]`
  );
}

/** The live event stream's state, as the sidebar shows it. */
async function expectLive(panel: Locator): Promise<void> {
  await expect(panel.locator('.jp-raylab-banner-error')).toHaveCount(0, {
    timeout: 60_000
  });
}

interface IJupyterApp {
  commands: { execute(id: string, args?: unknown): Promise<unknown> };
}

/** A new notebook in the user's own kernel (python3), active in the main area. */
async function newNotebook(page: Page): Promise<void> {
  await page.evaluate(async () => {
    const app = (window as unknown as { jupyterapp: IJupyterApp }).jupyterapp;
    const panel = (await app.commands.execute('notebook:create-new', {
      kernelName: 'python3'
    })) as {
      context: { ready: Promise<void> };
      sessionContext: { ready: Promise<void> };
    };
    // A cell's source set before the document has loaded would be replaced by it.
    await panel.context.ready;
    await panel.sessionContext.ready;
    // runCell's notebook (the shell's current widget follows the focus, which a
    // dialog or the sidebar may hold).
    (window as unknown as { raylabNotebook: unknown }).raylabNotebook = panel;
  });
  await expect(
    page.locator('.jp-NotebookPanel .jp-Notebook-ExecutionIndicator')
  ).toHaveAttribute('data-status', 'idle', { timeout: 120_000 });
}

/**
 * Run `code` in the active notebook's next cell as a user does; resolve with
 * the cell's output once it shows `RESULT` or an error.
 */
async function runCell(page: Page, code: string): Promise<string> {
  const index = await page.evaluate(async source => {
    const app = (window as unknown as { jupyterapp: IJupyterApp }).jupyterapp;
    const panel = (
      window as unknown as {
        raylabNotebook: {
          content: {
            activeCellIndex: number;
            activeCell: {
              model: { sharedModel: { setSource(s: string): void } };
            };
          };
          activate(): void;
        };
      }
    ).raylabNotebook;
    panel.activate();
    const notebook = panel.content;
    const at = notebook.activeCellIndex;
    notebook.activeCell.model.sharedModel.setSource(source);
    await app.commands.execute('notebook:run-cell-and-insert-below');
    return at;
  }, code);
  const output = page
    .locator('.jp-NotebookPanel:visible .jp-Notebook .jp-Cell')
    .nth(index)
    .locator('.jp-OutputArea');
  await expect(output).toContainText(/RESULT|Error/, { timeout: 240_000 });
  return output.innerText();
}

test('alice makes a cluster from the sidebar and runs a GPU task on it', async ({
  browser
}) => {
  const alice = await login(browser, 'alice');
  // The sidebar's New cluster dialog, on the process nodes' GPU type.
  const panel = await openSidebar(alice.page);
  await expectLive(panel);
  await panel.getByRole('button', { name: 'New cluster' }).first().click();
  const dialog = alice.page.locator('.jp-Dialog-content');
  await expect(dialog.getByText('New Ray cluster')).toBeVisible();
  await dialog.locator('#jp-raylab-new-name').fill(CLUSTER);
  await dialog.locator('#jp-raylab-new-gpu_type').selectOption('proc');
  await dialog.locator('#jp-raylab-new-gpus').fill('1');
  await dialog.locator('#jp-raylab-new-workers').fill('1');
  // What she typed is what is sent (a late focus once moved a field's text
  // into the name: sidebar.spec.ts's busy browser).
  await expect(dialog.locator('#jp-raylab-new-name')).toHaveValue(CLUSTER);
  await dialog.getByRole('button', { name: 'Create the cluster' }).click();
  await expect(alice.page.locator('.jp-Dialog')).toHaveCount(0);
  // Live through the hub's proxy: the card appears, then turns Ready, no reload.
  await expect(card(alice.page, CLUSTER)).toBeVisible();
  await expect(card(alice.page, CLUSTER)).toHaveAttribute(
    'data-phase',
    'Ready',
    { timeout: READY_TIMEOUT }
  );
  await expect(card(alice.page, CLUSTER)).toContainText('1/1 ready');

  // A notebook connected from the card runs a GPU task on the worker pod.
  await newNotebook(alice.page);
  await card(alice.page, CLUSTER)
    .getByRole('button', { name: `Connect notebook to ${CLUSTER}` })
    .click();
  await expect(
    alice.page.locator('.Toastify__toast').filter({ hasText: 'Connected' })
  ).toContainText(`Connected this kernel to ${CLUSTER}`, { timeout: 240_000 });
  const ran = await runCell(
    alice.page,
    [
      'import ray, socket',
      '@ray.remote(num_gpus=1)',
      'def where():',
      '    return socket.gethostname(), ray.get_gpu_ids()',
      'host, gpus = ray.get(where.remote())',
      'print("RESULT", host, gpus, ray.cluster_resources().get("GPU"))'
    ].join('\n')
  );
  expect(ran).toMatch(
    new RegExp(`RESULT ${CLUSTER}-\\S*worker\\S* \\[0\\] 1\\.0`)
  );
  // Her kernel stays connected (the cluster is in use) when the page closes.
  await alice.context.close();
});

test('bob, beside alice, can neither see nor reach her cluster', async ({
  browser
}) => {
  const alice = await login(browser, 'alice');
  const bob = await login(browser, 'bob');
  await expect(card(alice.page, CLUSTER)).toHaveAttribute(
    'data-phase',
    'Ready'
  );

  // Nothing in his sidebar...
  const bobPanel = await openSidebar(bob.page);
  await expectLive(bobPanel);
  await expect(bobPanel.locator('.jp-raylab-empty')).toContainText(
    'You have no Ray clusters'
  );
  await expect(bobPanel.locator('.jp-raylab-card')).toHaveCount(0);
  // ...his own server does not know it...
  const mine = await bob.page.request.get(
    `${HUB}/user/bob/raylab/clusters/${CLUSTER}`
  );
  expect(mine.status()).toBe(404);
  expect((await mine.json()).error).toContain(`no cluster named '${CLUSTER}'`);
  // ...and alice's server is not his to ask.
  const hers = await bob.page.request.get(
    `${HUB}/user/alice/raylab/clusters/${CLUSTER}`,
    { maxRedirects: 0 }
  );
  expect(hers.status()).not.toBe(200);

  // His kernel, straight at her head's pod: without her token Ray's dashboard
  // answers 401, and Ray Client lets him in neither (refused, or never ready).
  await newNotebook(bob.page);
  const ip = process.env.RAYLAB_HUB_HEAD_IP;
  const refused = await runCell(
    bob.page,
    [
      'import threading, urllib.error, urllib.request, ray',
      'try:',
      `    urllib.request.urlopen("http://${ip}:8265/api/version", timeout=10)`,
      '    dashboard = "open"',
      'except urllib.error.HTTPError as err:',
      '    dashboard = err.code',
      'outcome = []',
      'def attempt():',
      '    try:',
      `        ray.init("ray://${ip}:10001")`,
      '        outcome.append("CONNECTED")',
      '    except Exception as err:',
      '        outcome.append(f"{type(err).__name__}: {err}")',
      'thread = threading.Thread(target=attempt, daemon=True)',
      'thread.start(); thread.join(60)',
      'print("RESULT dashboard", dashboard, "client", outcome or ["no answer in 60 s"])'
    ].join('\n')
  );
  console.log(refused);
  expect(refused).toContain('RESULT dashboard 401 client');
  expect(refused).not.toContain('CONNECTED');
  await alice.context.close();
  await bob.context.close();
});

test("the admin sees every user's clusters with their owners", async ({
  browser
}) => {
  // bob's cluster has the name of alice's (test_hub.py made it so): two rows,
  // told apart by their namespace.
  const bobs = process.env.RAYLAB_HUB_BOB_CLUSTER ?? CLUSTER;
  const admin = await login(browser, 'admin', ADMIN_PASSWORD);
  const panel = await openSidebar(admin.page);
  await expectLive(panel);
  await panel.getByRole('radio', { name: 'All users' }).check();
  // alice's and bob's clusters are in their own namespaces: the admin's server
  // sees them through its cluster-wide watch (admin_watch_namespaces), and the
  // overview says whose and where.
  const overview = panel.getByRole('table', { name: "Every user's clusters" });
  const row = (name: string, owner: string): Locator =>
    overview.locator(
      `tr[data-cluster="${name}"][data-namespace="ray-${owner}"]`
    );
  await expect(row(CLUSTER, 'alice')).toBeVisible({ timeout: 60_000 });
  await expect(overview.locator('thead th')).toHaveText([
    'Owner',
    'Namespace',
    'Cluster',
    'GPUs',
    'GPUs used',
    'Idle GPUs',
    'Status',
    'Idle',
    'GPU-h (7 d)',
    'Actions'
  ]);
  for (const [name, owner] of [
    [CLUSTER, 'alice'],
    [bobs, 'bob']
  ]) {
    const it = row(name, owner);
    await expect(it.locator('td').nth(0)).toHaveText(owner, {
      timeout: 60_000
    });
    await expect(it.locator('td').nth(1)).toHaveText(`ray-${owner}`);
    await expect(it.locator('td').nth(2)).toHaveText(name);
    // Their dashboards are behind their owners' servers, not the admin's.
    await expect(
      it.getByRole('button', { name: /Open the Ray dashboard/ })
    ).toHaveCount(0);
  }
  // The admin suspends bob's cluster from the overview: the sidebar sends it
  // to namespaces/ray-bob/clusters/NAME (test_hub.py checks it in Kubernetes);
  // alice's, of the same name, stays as it was.
  const his = row(bobs, 'bob');
  await his
    .getByRole('button', { name: `Suspend ${bobs} in ray-bob`, exact: true })
    .click();
  await expect(his.locator('td').nth(6)).toHaveText('Suspended', {
    timeout: 60_000
  });
  await expect(
    his.getByRole('button', { name: `Resume ${bobs} in ray-bob` })
  ).toBeVisible();
  await expect(row(CLUSTER, 'alice').locator('td').nth(6)).toHaveText('Ready');
  await admin.context.close();
});

test('alice comes back after the hub stopped her server', async ({
  browser
}) => {
  const alice = await login(browser, 'alice');
  const panel = await openSidebar(alice.page);
  await expectLive(panel);
  // The hub's raylab-culler kept watching while her server was away: it saw the
  // cluster idle and warned her; the card says so and offers Keep running.
  const it = card(alice.page, CLUSTER);
  await expect(it).toBeVisible();
  await expect(it.locator('.jp-raylab-card-idle')).toContainText(/idle/, {
    timeout: 60_000
  });
  await expect(
    it.getByRole('button', { name: `Keep ${CLUSTER} running` })
  ).toBeVisible();
  await it.getByRole('button', { name: `Keep ${CLUSTER} running` }).click();
  await expect(
    it.getByRole('button', { name: `Keep ${CLUSTER} running` })
  ).toHaveCount(0, { timeout: 60_000 });
  await alice.context.close();
});

test('carol is told which permission her Role lacks', async ({ browser }) => {
  const carol = await login(browser, 'carol');
  const panel = await openSidebar(carol.page);
  await panel.getByRole('button', { name: 'New cluster' }).first().click();
  const dialog = carol.page.locator('.jp-Dialog-content');
  await dialog.locator('#jp-raylab-new-name').fill('carol-exp');
  await dialog.locator('#jp-raylab-new-gpu_type').selectOption('proc');
  await dialog.locator('#jp-raylab-new-gpus').fill('1');
  await dialog.getByRole('button', { name: 'Create the cluster' }).click();
  const said =
    /create secrets in namespace 'ray-carol'.*docs\/kubernetes-rbac\.md/s;
  await expect(carol.page.locator('body')).toContainText(said, {
    timeout: 60_000
  });
  await carol.page.keyboard.press('Escape');

  // `up` in her notebook says the same.
  await newNotebook(carol.page);
  const up = await runCell(
    carol.page,
    [
      '%load_ext raylab',
      'from IPython.core.error import UsageError',
      'try:',
      '    get_ipython().run_line_magic("raycluster", "up --name carol-exp --gpu-type proc --gpus 1 --no-connect")',
      'except UsageError as err:',
      '    print("RESULT", err)'
    ].join('\n')
  );
  expect(up).toMatch(said);
  await carol.context.close();
});

test('the sidebars live through a hub restart', async ({ browser }) => {
  const alice = await login(browser, 'alice');
  const panel = await openSidebar(alice.page);
  await expectLive(panel);
  await expect(card(alice.page, CLUSTER)).toBeVisible();
  // test_hub.py restarts the hub now, and suspends the cluster once it is back
  // (as kubectl or the culler could): the open sidebar follows.
  console.log('READY-FOR-RESTART');
  await expect(card(alice.page, CLUSTER)).toHaveAttribute(
    'data-phase',
    'Suspended',
    { timeout: 180_000 }
  );
  await alice.page.reload();
  await labReady(alice.page);
  const again = await openSidebar(alice.page);
  await expectLive(again);
  await expect(card(alice.page, CLUSTER)).toHaveAttribute(
    'data-phase',
    'Suspended'
  );
  await alice.context.close();
});
