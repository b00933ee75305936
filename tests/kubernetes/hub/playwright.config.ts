/**
 * Playwright configuration of the JupyterHub journey (hub.journey.ts), run by
 * test_hub.py one test at a time against the hub it deployed. Plain Playwright,
 * not Galata: Galata's fixtures talk to a Jupyter server at its root, and here
 * the hub's login page and proxy come first. Debian's Chromium, never a download.
 */
import * as path from 'path';

import { PlaywrightTestConfig } from '@playwright/test';

const config: PlaywrightTestConfig = {
  testDir: __dirname,
  testMatch: 'hub.journey.ts',
  outputDir: path.resolve(__dirname, '../../../test-results/hub'),
  reporter: [['list']],
  retries: 0,
  workers: 1,
  timeout: 600_000,
  expect: { timeout: 30_000 },
  use: {
    browserName: 'chromium',
    viewport: { width: 1280, height: 800 },
    launchOptions: {
      executablePath: process.env.RAYLAB_CHROMIUM ?? '/usr/bin/chromium',
      args: ['--disable-dev-shm-usage', '--disable-gpu']
    },
    video: 'off',
    trace: 'retain-on-failure',
    screenshot: 'only-on-failure'
  }
};

export default config;
