// ---- filters, counts and the list -------------------------------------------------------------------------------
// Filtering works on the small integer columns (one per dimension), never on the DOM: a click at 20,000 samples is a
// loop over arrays. The list draws only the first cards that match and appends more as the reader scrolls near its
// end, so a page never holds more cards than were looked at.

// no prototype: a name from the address (#f=__proto__:x, constructor:y) must not reach Object's own members
const chosen = Object.create(null);
dims.forEach((d) => (chosen[d] = new Set()));
let query = "";
let drawEverything = false;
const FIRST_CARDS = 6, MORE_CARDS = 20;  // a 1280 x 900 window shows two or three cards
let shown = [];
let drawn = 0;
let countCells = null;
const listBox = document.getElementById("cards");
const moreBox = document.getElementById("more");

function allowedCodes(d) {
  if (!chosen[d].size) return null;
  const mask = new Uint8Array(values[d].length);
  values[d].forEach((v, k) => { if (chosen[d].has(v)) mask[k] = 1; });
  return mask;
}

let searchText = null;  // per question: sample id, question and video, lower case (built at the first search)
function searchHits() {
  if (!query) return null;
  if (searchText === null) {
    searchText = new Array(NQ);
    for (let j = 0; j < NQ; j++) {
      const q = questionLines.get(j);
      searchText[j] = (q.id + " " + (q.q || "") + " " + (q.video || "")).toLowerCase();
    }
  }
  const hits = new Uint8Array(NQ);
  for (let j = 0; j < NQ; j++) if (searchText[j].includes(query)) hits[j] = 1;
  return hits;
}

// The cards that pass every filter, and per dimension the count of each value among the cards the *other*
// dimensions' choices leave (choosing a route shows how many of those are correct); with nothing chosen the counts
// are the runs' totals, the reports' numbers.
function recompute() {
  const masks = dims.map(allowedCodes);
  const cols = dims.map((d) => columns[d]);
  const multi = dims.map((d) => d === "tag");
  const counts = dims.map((d) => new Int32Array(values[d].length));
  const hits = searchHits();
  const out = [];
  const passes = (k, i) => {
    const m = masks[k];
    if (!m) return true;
    if (!multi[k]) return m[cols[k][i]] === 1;
    for (const code of cols[k][i]) if (m[code]) return true;
    return false;
  };
  const add = (k, i) => {
    if (!multi[k]) counts[k][cols[k][i]]++;
    else for (const code of cols[k][i]) counts[k][code]++;
  };
  for (let i = 0; i < N; i++) {
    if (hits && !hits[cardQuestion[i]]) continue;
    let fails = 0, failed = -1;
    for (let k = 0; k < dims.length && fails < 2; k++) {
      if (!passes(k, i)) { fails++; failed = k; }
    }
    if (fails > 1) continue;
    if (fails === 0) {
      out.push(i);
      for (let k = 0; k < dims.length; k++) add(k, i);
    } else add(failed, i);
  }
  return { shown: out, counts: counts };
}

function drawFilters() {
  const box = document.getElementById("filters");
  box.innerHTML = dims.map((d) => {
    const boxes = values[d].map((v, k) =>
      '<label><input type="checkbox" data-dim="' + esc(d) + '" data-value="' + esc(v) + '"' +
      (chosen[d].has(v) ? " checked" : "") + "> " + esc(v) +
      ' <span class="count" data-dim="' + esc(d) + '" data-value="' + esc(v) + '" data-k="' + k + '"></span></label>').join("");
    return '<fieldset data-dim="' + esc(d) + '"' + (values[d].length > 12 ? ' class="many"' : "") + "><legend>" + esc(d) +
      "</legend>" + boxes + "</fieldset>";
  }).join("");
  countCells = dims.map((d) => Array.from(box.querySelectorAll('.count[data-dim="' + CSS.escape(d) + '"]')));
  box.addEventListener("change", (e) => {
    const t = e.target;
    if (!t.dataset.dim) return;
    if (t.checked) chosen[t.dataset.dim].add(t.dataset.value);
    else chosen[t.dataset.dim].delete(t.dataset.value);
    timed(e, () => { update(); remember(); });
  });
  document.getElementById("search").addEventListener("input", (e) => {
    query = e.target.value.trim().toLowerCase();
    timed(e, update);
  });
}

// How long an input took until the browser painted its result, from the event's own time (B18 reads these).
let inputs = 0;
function timed(event, work) {
  const from = event.timeStamp;
  work();
  afterPaint(() => {
    inputs++;
    document.body.dataset.inputMs = (performance.now() - from).toFixed(1);
    document.body.dataset.inputs = String(inputs);
  });
}

// the filters chosen, as the address writes them
function chosenPairs() {
  const pairs = [];
  for (const d of dims) for (const v of chosen[d]) pairs.push([d, v]);
  return pairs;
}

// the address keeps the filters, so that a filtered view can be linked (and a question opened from a card keeps
// them for the way back)
function remember() {
  const state = readAddress();
  state.f = chosenPairs();
  history.replaceState(null, "", addressOf(state));
}

function drawMore(count) {
  const end = Math.min(shown.length, drawn + count);
  const parts = [];
  for (let k = drawn; k < end; k++) parts.push(cardHtml(shown[k]));
  listBox.insertAdjacentHTML("beforeend", parts.join(""));
  drawn = end;
  const left = shown.length - drawn;
  moreBox.innerHTML = left > 0 ? '<button type="button" id="draw-more">draw ' + Math.min(left, MORE_CARDS) + " more</button> " +
    drawn + " of " + shown.length + " drawn; more are drawn as you scroll" : "";
  if (left > 0 && moreWatcher) {  // watched again: if the end is still in reach, the watcher draws the next cards
    moreWatcher.unobserve(moreBox);
    moreWatcher.observe(moreBox);
  }
}

const moreWatcher = "IntersectionObserver" in window ? new IntersectionObserver((entries) => {
  if (entries.some((e) => e.isIntersecting) && drawn < shown.length) drawMore(MORE_CARDS);
}, { rootMargin: "1500px 0px" }) : null;
moreBox.addEventListener("click", (e) => { if (e.target.id === "draw-more") drawMore(MORE_CARDS); });

function update() {
  const result = recompute();
  shown = result.shown;
  drawn = 0;
  listBox.innerHTML = "";
  drawMore(drawEverything ? shown.length : FIRST_CARDS);
  dims.forEach((d, k) => countCells[k].forEach((el) => { el.textContent = result.counts[k][Number(el.dataset.k)]; }));
  document.getElementById("shown").textContent = shown.length + " of " + N + " samples shown";
}

function chooseFromAddress(state) {
  dims.forEach((d) => chosen[d].clear());
  for (const [d, v] of state.f) if (chosen[d]) chosen[d].add(v);
  document.querySelectorAll("#filters input[type=checkbox]").forEach((box) => {
    box.checked = chosen[box.dataset.dim].has(box.dataset.value);
  });
}
