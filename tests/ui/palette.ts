import { expect, type Locator, type Page } from '@playwright/test';

/**
 * Open JupyterLab's command palette and type `query` into it; returns the
 * palette. Through its command, not its shortcut (a key press right after a
 * notebook opens can land before anything holds the focus), and again until the
 * query is in: the modal palette hides when it loses the focus, which a notebook
 * still opening (its first cell, its kernel) can take from it.
 */
export async function searchPalette(
  page: Page,
  query: string
): Promise<Locator> {
  const palette = page.locator('#command-palette');
  const input = palette.locator('input');
  await expect(async () => {
    if (!(await input.isVisible())) {
      await page.evaluate(async () => {
        const app = (
          window as unknown as {
            jupyterapp: { commands: { execute(id: string): Promise<unknown> } };
          }
        ).jupyterapp;
        await app.commands.execute('apputils:activate-command-palette');
      });
    }
    await input.fill(query, { timeout: 2_000 });
    await expect(input).toBeVisible({ timeout: 500 });
    await expect(input).toHaveValue(query, { timeout: 500 });
  }).toPass({ timeout: 60_000 });
  return palette;
}
