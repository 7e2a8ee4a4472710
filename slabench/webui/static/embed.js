// Puts the slabench live charts page under the LLM tab of Locust's web UI. Locust draws the tab's figures table
// itself (its extended-tab API); this adds the charts below it while that tab is open, and removes them otherwise.
(() => {
  const KEY = "llm";
  const FRAME_ID = "slabench-llm-frame";
  const page = new URL("./", document.currentScript.src).href; // .../slabench/

  function isDark() {
    const m = getComputedStyle(document.body).backgroundColor.match(/\d+(\.\d+)?/g);
    if (!m) return false;
    const [r, g, b] = m.map(Number);
    return 0.2126 * r + 0.7152 * g + 0.0722 * b < 128;
  }

  function tick() {
    const onTab = new URLSearchParams(location.search).get("tab") === KEY;
    let frame = document.getElementById(FRAME_ID);
    if (!onTab) {
      if (frame) frame.remove();
      return;
    }
    if (frame) return;
    const tablist = document.querySelector('[role="tablist"]');
    const container = tablist && (tablist.closest(".MuiContainer-root") || tablist.parentElement.parentElement);
    if (!container) return;
    frame = document.createElement("iframe");
    frame.id = FRAME_ID;
    frame.title = "LLM live charts";
    frame.src = page + "?embedded=1&theme=" + (isDark() ? "dark" : "light");
    frame.style.cssText = "display:block;width:100%;height:900px;border:0;margin-top:16px";
    container.appendChild(frame);
  }

  // The page reports its height, so the frame needs no scroll bar of its own.
  window.addEventListener("message", (e) => {
    const frame = document.getElementById(FRAME_ID);
    if (frame && e.origin === location.origin && e.data && e.data.slabenchHeight) {
      frame.style.height = Math.ceil(e.data.slabenchHeight) + "px";
    }
  });
  setInterval(tick, 250);
})();
