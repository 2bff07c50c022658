"""The clinical-notes example's public text: encyclopaedic and general-health paragraphs made from a seed.

The base model of the example is pre-trained on this text (it stands for the public corpus a real base model
saw). It is written here, by a small grammar, so that every interpreter and platform gets the same text from
the same seed: ``random.Random`` seeded with an integer and drawn with ``random()``, ``choice`` and
``randint`` gives the same stream on every CPython 3 (only those calls are used, and no set or hash order).

A paragraph is one topic (a town, a river, a region, a plant or animal, a person, a dish, a craft or a piece of
health advice), written as one to three sentences from that topic's templates. A ``{slot}`` is filled from a
word list; the same slot name names the same thing across the paragraph's sentences (``{town}`` twice is one
town), a trailing digit draws another (``{food2}``). Proper names (towns, rivers, people, species) are
pseudo-words made from syllables by the same seed, so the text has a few thousand distinct words while this
file lists about a thousand English ones. No sentence is about a patient: the records are the private text.
"""

from __future__ import annotations

import random
import re

# the word lists keep several words to a line
# fmt: off
# ── proper names: syllables ───────────────────────────────────────────────────────────────────────────────
ONSETS = ("b", "br", "c", "d", "dr", "f", "g", "gr", "h", "k", "l", "m", "n", "p", "r", "s", "st", "t", "tr", "v",
          "w", "z")
VOWELS = ("a", "a", "e", "e", "i", "o", "o", "u", "ai", "ea", "ou")
CODAS = ("", "", "", "", "l", "m", "n", "r", "s", "nd", "rn", "st")
ENDINGS = {
    "town": ("ford", "by", "ham", "wick", "ton", "mouth", "stead", "burg", "vale", "more", "field", "bridge"),
    "river": ("", "", "a", "el", "en", "ine", "ow"),
    "region": ("ia", "and", "ey", "mark", "shire", "aria", "oria"),
    "mountain": ("", "horn", "berg", "fell", "crag", "peak"),
    "given": ("", "a", "o", "in", "ette", "ric", "an", "ia"),
    "surname": ("", "son", "er", "ley", "man", "ard", "ing", "ovic", "ez", "ani"),
    "genus": ("us", "a", "ium", "is", "ops", "ella", "odon"),
    "epithet": ("ensis", "alis", "ata", "ii", "icus", "osa", "ina"),
    "dish": ("o", "a", "et", "ka", "ini", "ade"),
}
# fmt: on
#: how many of each the lexicon holds
SIZES = {
    "town": 500,
    "river": 150,
    "region": 100,
    "mountain": 100,
    "given": 250,
    "surname": 500,
    "genus": 250,
    "epithet": 250,
    "dish": 120,
}


def _pseudo(rng: random.Random, kind: str) -> str:
    syllables = 2 if kind in ("river", "given", "dish", "epithet") else rng.randint(1, 2)
    word = "".join(rng.choice(ONSETS) + rng.choice(VOWELS) + rng.choice(CODAS) for _ in range(syllables))
    word += rng.choice(ENDINGS[kind])
    return word if kind == "epithet" else word.capitalize()


def make_lexicon(rng: random.Random) -> dict[str, list[str]]:
    """The seed's proper names, distinct within each kind (lists, in the order drawn)."""
    lexicon: dict[str, list[str]] = {}
    for kind, n in SIZES.items():
        names: list[str] = []
        seen: set[str] = set()
        while len(names) < n:
            w = _pseudo(rng, kind)
            if 4 <= len(w) <= 11 and w not in seen:
                seen.add(w)
                names.append(w)
        lexicon[kind] = names
    return lexicon


# fmt: off
# ── English word lists ────────────────────────────────────────────────────────────────────────────────────
WORDS: dict[str, tuple[str, ...]] = {
    "direction": ("north", "south", "east", "west", "north-east", "south-west", "north-west", "south-east"),
    "terrain": (
        "chalk hills", "limestone plateau", "river valley", "coastal plain", "pine forest", "salt marsh",
        "granite uplands", "wooded ridge", "open heath", "volcanic slopes", "sand dunes", "peat bog",
        "terraced vineyards", "broad floodplain", "rocky headland", "birch woodland", "high moorland",
    ),
    "trade": (
        "wool", "timber", "salt", "copper", "glass", "pottery", "leather", "linen", "cheese", "rope", "paper",
        "clocks", "lace", "barley", "honey", "slate", "tin", "silk", "cider", "candles", "barrels", "bells",
    ),
    "building": (
        "bridge", "cathedral", "lighthouse", "watermill", "windmill", "market hall", "library", "town hall",
        "castle", "abbey", "observatory", "harbour wall", "railway station", "theatre", "museum", "granary",
        "chapel", "aqueduct", "clock tower", "customs house", "botanical garden", "university", "hospital",
    ),
    "material": ("sandstone", "red brick", "oak", "grey granite", "marble", "limestone", "iron", "flint", "cedar"),
    "event": (
        "a great flood", "a long drought", "a fire", "an outbreak of cholera", "a harsh winter", "a famine",
        "a storm", "an earthquake", "a failed harvest", "a siege", "a trade dispute", "a bank collapse",
    ),
    "verb_built": ("built", "rebuilt", "restored", "enlarged", "completed", "rebuilt in part", "finished"),
    "festival": (
        "spring fair", "lantern procession", "harvest festival", "music week", "boat race", "horse market",
        "book fair", "flower show", "cheese market", "folk dance festival",
    ),
    "size": ("small", "quiet", "busy", "large", "old", "prosperous", "compact", "historic", "growing"),
    "industry": (
        "farming", "fishing", "tourism", "shipbuilding", "mining", "forestry", "weaving", "printing",
        "brewing", "engineering", "publishing", "dairy farming", "fruit growing", "stone quarrying",
    ),
    "climate": (
        "mild and wet", "dry and sunny", "cold in winter and warm in summer", "windy", "humid",
        "cool and cloudy", "temperate", "harsh", "changeable",
    ),
    "crop": (
        "wheat", "rye", "oats", "potatoes", "apples", "pears", "grapes", "olives", "hops", "flax", "maize",
        "sugar beet", "cherries", "plums", "cabbages", "onions", "rice", "beans",
    ),
    "animal": (
        "heron", "otter", "beetle", "moth", "lizard", "toad", "newt", "falcon", "owl", "vole", "shrew",
        "badger", "salmon", "trout", "eel", "crab", "snail", "butterfly", "dragonfly", "bat", "deer", "hare",
        "woodpecker", "swallow", "kingfisher", "warbler", "frog", "spider", "wasp", "bee", "grasshopper",
        "mole", "stoat", "pike", "perch", "mussel", "plover", "curlew", "lark", "finch", "weasel", "ant",
    ),
    "plant": (
        "orchid", "fern", "moss", "lichen", "sedge", "rush", "willow", "alder", "oak", "maple", "thistle",
        "clover", "lily", "poppy", "violet", "heather", "birch", "rowan", "juniper", "primrose", "bellflower",
        "buttercup", "campion", "saxifrage", "gentian", "yarrow", "sorrel", "mint", "sage", "reed",
    ),
    "use": (
        "dye cloth", "flavour soups", "make baskets", "treat coughs, though it does not work",
        "feed cattle in winter", "thatch roofs", "make tea", "mark field boundaries", "make brooms",
    ),
    "colour": (
        "brown", "grey", "green", "pale yellow", "dark red", "black", "white", "olive", "rust-coloured",
        "silver", "bronze", "bright blue", "striped", "speckled", "mottled",
    ),
    "habitat": (
        "wetlands", "pine forests", "coastal dunes", "shallow lakes", "mountain streams", "meadows", "hedgerows",
        "old orchards", "rocky shores", "reed beds", "river banks", "chalk grassland", "damp woodland",
        "city parks", "estuaries", "heathland", "alpine pastures", "caves",
    ),
    "diet": (
        "insects", "seeds", "small fish", "snails", "worms", "nectar", "berries", "leaves", "grasses",
        "fallen fruit", "algae", "crustaceans", "beetle larvae", "roots", "fungi",
    ),
    "season": ("spring", "early summer", "late summer", "autumn", "winter", "the rainy season", "the dry season"),
    "threat": (
        "drainage of wetlands", "loss of hedgerows", "road traffic", "pesticides", "warmer winters",
        "invasive species", "overfishing", "river pollution", "new housing", "forest clearance",
    ),
    "profession": (
        "physician", "nurse", "midwife", "pharmacist", "botanist", "engineer", "cartographer", "architect",
        "chemist", "astronomer", "composer", "painter", "poet", "historian", "surgeon", "teacher",
        "geologist", "mathematician", "printer", "weaver", "explorer", "economist", "sculptor", "novelist",
        "naturalist", "librarian", "photographer", "statistician", "nutritionist", "epidemiologist",
    ),
    "work": (
        "a survey of the coast", "a study of bird migration", "a method for purifying water", "an atlas of rivers",
        "a series of landscape paintings", "a reform of public schools", "a treatise on light",
        "the first census of the region", "a dictionary of plant names", "a new kind of lens",
        "a history of the guilds", "a cookery book", "a collection of folk songs", "a map of the night sky",
        "a design for cheap housing", "a study of childhood nutrition", "a clean water campaign",
        "a handbook of first aid", "the first public baths", "a mechanical loom", "a system of shorthand",
    ),
    "adj_work": (
        "influential", "careful", "popular", "controversial", "widely read", "patient", "ambitious", "elegant",
        "detailed", "unfinished", "much admired", "pioneering", "modest",
    ),
    "place_study": (
        "the academy", "the medical school", "the observatory", "the royal society", "the city hospital",
        "the botanical garden", "the college of engineering", "the conservatoire", "the university",
    ),
    "ingredient": (
        "lentils", "oats", "barley", "spinach", "walnuts", "chickpeas", "rice", "rye flour", "butter",
        "cream", "garlic", "onions", "leeks", "carrots", "mushrooms", "fresh herbs", "dried plums", "apples",
        "honey", "smoked fish", "goat cheese", "pepper", "cinnamon", "tomatoes", "white beans", "cabbage",
        "dill", "sour cherries", "buckwheat", "yoghurt", "hazelnuts", "pumpkin", "lemon", "almonds",
    ),
    "cooking": ("baked", "stewed", "fried", "steamed", "roasted", "grilled", "boiled", "slow-cooked", "smoked"),
    "meal": (
        "a festival dish", "an everyday supper", "a breakfast", "a street food", "a winter soup",
        "a dessert", "a side dish", "a picnic food", "a sweet pastry", "a simple bread",
    ),
    "craft": (
        "weaving", "pottery", "glassblowing", "bookbinding", "woodcarving", "basket making", "blacksmithing",
        "lacemaking", "printmaking", "boatbuilding", "clockmaking", "bell founding", "tanning", "dyeing",
    ),
    "tool": (
        "a wheel", "a loom", "a kiln", "a lathe", "an anvil", "a chisel", "a needle", "a press", "a furnace",
        "a mould", "a spindle", "a blowpipe", "a plane", "a file",
    ),
    "activity": (
        "walking", "cycling", "swimming", "gardening", "dancing", "climbing stairs", "rowing", "yoga",
        "stretching", "carrying shopping", "skating", "hiking", "team sports", "tai chi", "jogging",
    ),
    "benefit": (
        "lowers blood pressure", "improves sleep", "strengthens the heart", "keeps the joints supple",
        "lifts the mood", "helps control weight", "builds stronger bones", "improves balance",
        "reduces the risk of falls", "eases stress", "helps the body use sugar", "keeps the lungs healthy",
        "improves memory", "supports digestion",
    ),
    "group": (
        "older adults", "children", "teenagers", "pregnant women", "office workers", "new parents",
        "shift workers", "athletes", "students", "people who live alone", "most adults", "smokers",
        "people with arthritis", "retired people", "young children",
    ),
    "organ": (
        "heart", "lungs", "liver", "kidneys", "skin", "bones", "muscles", "teeth", "eyes", "brain",
        "immune system", "gut", "blood vessels", "nerves",
    ),
    "illness": (
        "measles", "whooping cough", "smallpox", "diphtheria", "scurvy", "rickets", "malaria", "cholera",
        "typhoid", "tuberculosis", "goitre", "dysentery", "polio", "tooth decay", "food poisoning", "typhus",
    ),
    "habit": (
        "sleep seven to nine hours", "eat vegetables every day", "drink enough water", "wash their hands often",
        "walk to work", "keep a regular bedtime", "avoid sugary drinks", "do not smoke", "eat whole grains",
        "spend time outdoors", "take short breaks from screens", "drink little alcohol", "eat breakfast",
    ),
    "advice": (
        "Wash your hands before meals and after using the toilet.",
        "Keep medicines in their boxes and out of the reach of children.",
        "Drink water regularly on hot days, even before you feel thirsty.",
        "Wear a hat and use sun cream when the sun is strong.",
        "Rest, drink fluids and stay at home while you have a fever.",
        "Ask a pharmacist before taking two medicines together.",
        "Store raw meat below cooked food in the refrigerator.",
        "Get up and move for a few minutes every hour.",
        "Brush your teeth twice a day with a fluoride toothpaste.",
        "Keep vaccinations up to date, including for adults.",
        "Cover your mouth and nose when you cough or sneeze.",
        "A first aid kit at home should hold plasters, bandages and a thermometer.",
    ),
    "measure": (
        "clean drinking water", "better sewers", "vaccination", "school meals", "public baths",
        "wider streets", "food inspection", "smoke control", "iodised salt", "free clinics", "safer housing",
    ),
    "science": (
        "a glass prism splits white light into colours", "warm air rises because it is less dense",
        "a magnet attracts iron but not copper", "sound travels faster in water than in air",
        "plants take in carbon dioxide and give off oxygen", "ice floats because it is lighter than water",
        "the moon's gravity raises the tides", "a lens bends light to form an image",
        "salt lowers the freezing point of water", "a pendulum swings with a steady period",
        "rust forms when iron meets water and air", "yeast turns sugar into gas and alcohol",
    ),
    "instrument": (
        "a barometer measures air pressure", "a thermometer measures temperature",
        "a microscope shows small living things", "a telescope gathers the light of distant stars",
        "a compass shows direction", "a sundial tells the time of day", "a rain gauge measures rainfall",
        "a spirit level shows whether a surface is flat", "a hygrometer measures humidity",
        "an hourglass measures a fixed span of time", "a sextant measures the angle of the sun",
        "a stethoscope carries the sounds of the heart and lungs",
    ),
    "adjective": (
        "useful", "simple", "reliable", "cheap", "delicate", "portable", "accurate", "sturdy", "common",
    ),
}

# ── templates, one tuple per topic: the opening sentence first, then sentences that may follow ─────────────
TOPICS: dict[str, tuple[str, ...]] = {
    "town": (
        "{town} is a {size} town on the {river} in {region}.",
        "Its economy was long based on {trade}, and today it lives mainly from {industry}.",
        "The {building} was {verb_built} in {year} from {material}.",
        "The town grew quickly after {year2}, when a road to {town2} was opened.",
        "In {year3}, {event} destroyed much of the old centre.",
        "Every {season} the town holds a {festival}.",
        "About {thousands} thousand people live there.",
    ),
    "river": (
        "The {river} is a river of {region} that rises in the {terrain} and flows {direction} for {km} kilometres.",
        "It joins the {river2} near {town}.",
        "Barges once carried {trade} down the river to the sea.",
        "Its valley is known for {crop} and {crop2}.",
        "The river floods most years in {season}.",
        "An old {building} of {material} stands on its bank at {town2}.",
    ),
    "region": (
        "{region} is a region of {terrain} between the {river} and the {mountain} range.",
        "The climate is {climate}, and most farms grow {crop} or keep sheep.",
        "Its largest town is {town}, and its highest point is {mountain} at {metres} metres.",
        "The region was known for {trade} until the {century} century.",
        "Many people there still work in {industry}.",
    ),
    "mountain": (
        "{mountain} is a mountain of {metres} metres in {region}.",
        "It was first climbed in {year} by a party from {town}.",
        "Its lower slopes are covered in {terrain}, and the {colour} {animal} is found near the summit.",
        "On a clear day the {river} can be seen from the top.",
    ),
    "species": (
        "The {colour} {animal} ({genus} {epithet}) lives in {habitat} across {region}.",
        "It feeds mainly on {diet}, and in {season} also on {diet2}.",
        "It is rarely longer than {cm} centimetres.",
        "Its numbers have fallen because of {threat}.",
        "It was first described in {year} by the naturalist {given} {surname}.",
        "Unlike most of its relatives, it is active by day.",
    ),
    "plant": (
        "The {colour} {plant} ({genus} {epithet}) grows in {habitat} across {region}.",
        "It flowers in {season} and is pollinated by bees and moths.",
        "It rarely grows taller than {cm} centimetres.",
        "Farmers in {region} once used it to {use}.",
        "It has become scarce because of {threat}.",
        "It was first described in {year} by the botanist {given} {surname}.",
    ),
    "person": (
        "{given} {surname} ({year}–{year_end}) was a {profession} from {town}, known for {work}.",
        "{given} studied at {place_study} in {town2} and later taught there.",
        "The work was {adj_work} and is still read today.",
        "A street in {town} is named after {given} {surname}.",
        "In {year_mid} {given} {surname} published a short account of {work2}.",
    ),
    "dish": (
        "{dish} is {meal} from {region}, made with {ingredient}, {ingredient2} and {ingredient3}.",
        "It is usually {cooking} and eaten warm.",
        "In {town} it is served with {ingredient4}.",
        "Recipes for it appear in cookery books from the {century} century.",
    ),
    "craft": (
        "{craft} has been practised in {town} since the {century} century.",
        "The main tools are {tool} and {tool2}.",
        "Apprentices learned the craft for {few} years before they could work alone.",
        "The guild of {town} kept strict rules about the quality of its work.",
        "Today a small museum shows the craft to visitors.",
    ),
    "exercise": (
        "Regular {activity} {benefit} in {group}.",
        "Even {minutes} minutes a day makes a difference.",
        "Health services advise adults to be active for about {hours} hours a week.",
        "It also {benefit2}, and it is good for the {organ} too.",
        "People who {habit} tend to live longer.",
    ),
    "nutrient": (
        "{nutrient} is needed for {nutrient_role}.",
        "Good sources include {nutrient_sources}.",
        "Too little of it over many months can lead to {nutrient_lack}.",
        "Most people who eat a varied diet get enough.",
        "{group} may need more of it than others.",
    ),
    "illness": (
        "{illness} was common in {region} until the {century} century.",
        "It became rarer after towns introduced {measure} and {measure2}.",
        "Children and {group} were most at risk.",
        "Doctors in {town} kept careful records of each outbreak.",
        "Today it is prevented mainly by {measure3}.",
    ),
    "advice": (
        "{advice}",
        "{advice2}",
        "People who {habit} are ill less often.",
    ),
    "science": (
        "A simple experiment shows that {science}.",
        "Pupils also learn that {instrument}, and how to make a {adjective} one at home.",
        "The effect was described by {given} {surname} of {town} in {year}.",
        "Schools in {region} still show it to pupils.",
    ),
}

#: nutrients: (name, what it is needed for, what a long lack of it leads to, good sources); a paragraph's
#: ``{nutrient}``, ``{nutrient_role}``, ``{nutrient_lack}`` and ``{nutrient_sources}`` are one row's
NUTRIENTS = (
    ("vitamin C", "healing wounds and healthy gums", "scurvy", "citrus fruit, peppers and cabbage"),
    ("vitamin D", "strong bones", "rickets in children", "oily fish, eggs and sunlight on the skin"),
    ("iron", "carrying oxygen in the blood", "anaemia and tiredness", "red meat, beans and leafy greens"),
    ("calcium", "building bones and teeth", "weak bones in later life", "milk, cheese and almonds"),
    ("fibre", "keeping the bowels regular", "constipation", "whole grains, beans and vegetables"),
    ("protein", "growth and the repair of muscles", "loss of muscle", "eggs, lentils, fish and nuts"),
    ("folate", "making new cells", "a kind of anaemia", "leafy greens, peas and oranges"),
    ("iodine", "the thyroid gland", "goitre", "seafood, dairy food and iodised salt"),
    ("zinc", "fighting infection", "slow healing", "shellfish, seeds and whole grains"),
    ("vitamin A", "seeing in dim light", "night blindness", "carrots, liver and sweet potatoes"),
    ("potassium", "a steady heartbeat", "muscle cramps", "bananas, potatoes and beans"),
    ("vitamin B12", "healthy nerves", "numbness and tiredness", "meat, fish, milk and eggs"),
)
_NUTRIENT_FIELDS = ("nutrient", "nutrient_role", "nutrient_lack", "nutrient_sources")

# fmt: on
#: numbers: slot → (low, high)
NUMBERS = {
    "year": (1480, 1960),
    "km": (12, 640),
    "metres": (600, 4200),
    "thousands": (2, 180),
    "cm": (2, 90),
    "minutes": (10, 40),
    "hours": (2, 5),
    "few": (3, 7),
}
_SLOT = re.compile(r"\{([a-z_]+?)(\d*)\}")
_ARTICLE = re.compile(r"\b([Aa]) (?=[aeiouAEIOU])")


def _century(rng: random.Random) -> str:
    return ("fourteenth", "fifteenth", "sixteenth", "seventeenth", "eighteenth", "nineteenth")[rng.randint(0, 5)]


def _fill(name: str, ctx: dict[str, str], lexicon: dict[str, list[str]], rng: random.Random) -> str:
    """The value of slot ``name`` (its base name without the trailing digit) in this paragraph."""
    if name in ctx:
        return ctx[name]
    base = name.rstrip("0123456789")
    if base in _NUTRIENT_FIELDS:
        row = rng.choice(NUTRIENTS)
        ctx.update(zip(_NUTRIENT_FIELDS, row))
        value = ctx[base]
    elif base in ("year_end", "year_mid"):
        born = int(_fill("year", ctx, lexicon, rng))
        value = str(born + (rng.randint(38, 88) if base == "year_end" else rng.randint(24, 37)))
    elif base == "century":
        value = _century(rng)
    elif base in NUMBERS:
        value = str(rng.randint(*NUMBERS[base]))
    elif base in lexicon:
        value = rng.choice(lexicon[base])
    else:
        value = rng.choice(WORDS[base])
    ctx[name] = value
    return value


def paragraph(rng: random.Random, lexicon: dict[str, list[str]]) -> str:
    """One paragraph: a topic, its opening sentence and zero to two of its other sentences, in order."""
    topic = rng.choice(list(TOPICS))
    templates = TOPICS[topic]
    rest = [i for i in range(1, len(templates)) if rng.random() < 0.3][:2]
    ctx: dict[str, str] = {}
    out = []
    for i in [0, *rest]:
        sentence = _SLOT.sub(lambda m: _fill(m.group(1) + m.group(2), ctx, lexicon, rng), templates[i])
        out.append(sentence[0].upper() + sentence[1:])
    return _ARTICLE.sub(lambda m: m.group(1) + "n ", " ".join(out))


def public_text(limit: int = 4000, seed: int = 0) -> list[str]:
    """``limit`` paragraphs of public text (module docstring), the same on every interpreter for one seed."""
    rng = random.Random(seed + 0x5EED)
    lexicon = make_lexicon(rng)
    return [paragraph(rng, lexicon) for _ in range(limit)]
