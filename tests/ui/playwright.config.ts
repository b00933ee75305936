/**
 * Playwright (Galata) configuration for the raylab browser tests.
 *
 * Run through tests/ui/test_browser.py, which starts a real `jupyter lab` and
 * sets RAYLAB_UI_URL. Debian's Chromium is used as it is: Playwright never
 * downloads a browser (PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD=1 at install time).
 */
import * as path from 'path';

import { PlaywrightTestConfig } from '@playwright/test';

const galataConfig = require('@jupyterlab/galata/lib/playwright-config');

// bench/bench_sidebar.py runs the sidebar benchmark with the same setup.
const bench = process.env.RAYLAB_PW_BENCH === '1';

const config: PlaywrightTestConfig = {
  ...galataConfig,
  testDir: bench ? path.resolve(__dirname, '../../bench') : __dirname,
  testMatch: bench ? 'bench_sidebar.ts' : '*.spec.ts',
  outputDir: path.resolve(__dirname, '../../test-results/ui'),
  reporter: [['list']],
  retries: 0,
  workers: 1,
  fullyParallel: false,
  // A cluster needs ~20 s to start on a 2-core machine; the journey waits for two.
  timeout: 300_000,
  expect: { timeout: 20_000 },
  use: {
    ...galataConfig.use,
    baseURL: process.env.RAYLAB_UI_URL ?? 'http://127.0.0.1:8888',
    browserName: 'chromium',
    viewport: { width: 1280, height: 800 },
    launchOptions: {
      executablePath: process.env.RAYLAB_CHROMIUM ?? '/usr/bin/chromium',
      args: ['--disable-dev-shm-usage', '--disable-gpu']
    },
    // Video needs Playwright's own ffmpeg download: off. Traces need nothing.
    video: 'off',
    trace: 'retain-on-failure',
    screenshot: 'only-on-failure'
  }
};

export default config;
