// The CADER viewer's scripts run in one function scope, in the order page.py lists them:
// viewer_util.js (this: the data, lazily parsed lines, the address, formatting), viewer_cards.js (one card),
// viewer_list.js (filters, counts, the list of cards drawn as the screen needs them), viewer_views.js (the views,
// the question view, sortable tables, start-up).
//
// The address carries a view: #v=runs|slices|samples|question|reports, #q=BENCHMARK/SAMPLE_ID (the question view),
// #f=DIM:VALUE|DIM:VALUE (filters), #all (draw every card of the list at once); words are joined by &.
const errorBox = document.getElementById("errors");
function report(message) {
  errorBox.hidden = false;
  const line = document.createElement("div");
  line.textContent = message;
  errorBox.appendChild(line);
}
window.addEventListener("error", (e) => report("script error: " + e.message));

const started = performance.now();
const DATA = JSON.parse(document.getElementById("data").textContent);
const N = DATA.question.length;
const dims = DATA.dims;
const values = DATA.values;
const columns = DATA.columns;
const cardQuestion = DATA.question;
const NQ = DATA.questions.id.length;

// One JSON value per line of a <script type="application/x-ndjson"> element, parsed only when asked for: at 20,000
// samples parsing everything up front would cost seconds; the list draws a few dozen cards at a time.
function lineStore(id) {
  let text = null, starts = null;
  const parsed = new Map();
  function index() {
    text = document.getElementById(id).textContent;
    starts = [0];
    for (let at = text.indexOf("\n"); at !== -1; at = text.indexOf("\n", at + 1)) starts.push(at + 1);
  }
  function raw(i) {
    if (starts === null) index();
    const end = i + 1 < starts.length ? starts[i + 1] - 1 : text.length;
    return text.slice(starts[i], end);
  }
  return {
    raw: raw,
    get(i) {
      let value = parsed.get(i);
      if (value === undefined) {
        value = JSON.parse(raw(i));
        parsed.set(i, value);
      }
      return value;
    },
  };
}
const cardLines = lineStore("card-lines");
const questionLines = lineStore("question-lines");

// "benchmark/sample id" of question j: the question view's address
function questionKey(j) {
  return values.benchmark[DATA.questions.benchmark[j]] + "/" + DATA.questions.id[j];
}
let keyToQuestion = null;
function questionOfKey(key) {
  if (keyToQuestion === null) {
    keyToQuestion = new Map();
    for (let j = 0; j < NQ; j++) keyToQuestion.set(questionKey(j), j);
  }
  return keyToQuestion.get(key);
}
// the cards (one per run) answering each question
const cardsOfQuestion = Array.from({ length: NQ }, () => []);
for (let i = 0; i < N; i++) cardsOfQuestion[cardQuestion[i]].push(i);

// A card as the drawing functions read it: its filter values, its question's fields and its own line.
function cardData(i) {
  const f = {};
  for (const d of dims) if (d !== "tag") f[d] = values[d][columns[d][i]];
  const q = questionLines.get(cardQuestion[i]);
  return Object.assign({}, q, cardLines.get(i), { f: f, i: i, qi: cardQuestion[i] });
}

function esc(s) {
  return String(s === null || s === undefined ? "" : s).replace(/[&<>"']/g,
    (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" })[c]);
}
function num(x, digits) {
  if (x === null || x === undefined) return "-";
  if (typeof x !== "number") return esc(x);
  return String(Number(x.toFixed(digits === undefined ? 3 : digits)));
}
function clock(seconds) {
  const s = Math.max(0, Math.round(seconds));
  const h = Math.floor(s / 3600), m = Math.floor((s % 3600) / 60), r = s % 60;
  const mm = h ? String(m).padStart(2, "0") : String(m);
  return (h ? h + ":" : "") + mm + ":" + String(r).padStart(2, "0");
}
function win(w) {
  return w ? "[" + num(w[0], 1) + ", " + num(w[1], 1) + "] s" : "-";
}

// ---- the address ------------------------------------------------------------------------------------------------
function readAddress() {
  const state = { all: false, f: [], v: null, q: null };
  for (const part of location.hash.slice(1).split("&")) {
    let word;
    try {
      word = decodeURIComponent(part);
    } catch (e) {
      continue;  // a malformed %-escape: that word is ignored, the page opens unharmed
    }
    if (word === "all") state.all = true;
    else if (word.startsWith("f=")) {
      for (const pair of word.slice(2).split("|")) {
        const at = pair.indexOf(":");
        if (at > 0) state.f.push([pair.slice(0, at), pair.slice(at + 1)]);
      }
    } else if (word.startsWith("v=")) state.v = word.slice(2);
    else if (word.startsWith("q=")) state.q = word.slice(2);
  }
  return state;
}
function addressOf(state) {
  const words = [];
  if (state.v) words.push("v=" + encodeURIComponent(state.v));
  if (state.q) words.push("q=" + encodeURIComponent(state.q));
  if (state.f.length) words.push("f=" + state.f.map((p) => encodeURIComponent(p[0]) + ":" + encodeURIComponent(p[1])).join("|"));
  if (state.all) words.push("all");
  return "#" + words.join("&");
}

// calls `done` once the browser has painted what the caller just drew (the frame after it)
function afterPaint(done) {
  requestAnimationFrame(() => setTimeout(done, 0));
}
