import type { Page } from '@playwright/test';

/**
 * Open JupyterLab's command palette through its command, not its shortcut: a key
 * press right after a notebook or panel opens can land before anything holds the
 * focus, and the palette then never opens.
 */
export async function openPalette(page: Page): Promise<void> {
  await page.evaluate(async () => {
    const app = (
      window as unknown as {
        jupyterapp: { commands: { execute(id: string): Promise<unknown> } };
      }
    ).jupyterapp;
    await app.commands.execute('apputils:activate-command-palette');
  });
}
