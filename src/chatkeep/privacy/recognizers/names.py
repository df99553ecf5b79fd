"""People's names behind unambiguous cues, with no model: greetings, sign-offs, introductions.

Names are the personal data users type most, and without the optional NER
backend nothing else finds them. A name cannot be told from any other
capitalised word by its shape, so this recognizer only reads a name where the
words around it say one must follow:

* a greeting at the start of a line: ``Hi Ana,``, ``Hola María:``, ``Dear Mr. Lee``,
  ``Sehr geehrte Frau Dr. Weber``;
* a sign-off before it: ``Thanks,\\nJohn``, ``Best regards,\\nAna García``, ``Saludos, Pedro``;
* a self-introduction: ``my name is``, ``I'm``, ``me llamo``, ``je m'appelle``, ``ich heiße``;
* a title: ``Mr``, ``Mrs``, ``Ms``, ``Dr``, ``Prof``, ``Sr.``, ``Sra.``, ``M.``, ``Mme``,
  ``Herr``, ``Frau`` (the span is the name, not the title);
* an e-mail display name: ``"Ana García" <ana.garcia@x.com>``;
* a form field: ``Name: Ana García``, ``Nombre:``, ``Prénom :``, ``Vorname:``.

Precision comes first: a name is one to four capitalised words (letters,
hyphens, apostrophes: ``O'Brien``, ``García-López``, ``José María``, with
particles such as ``de la`` or ``van`` between them), never a word on the stop
lists (``Hi team``, ``Dear Sir``, ``I'm Happy to help``, ``Mr. Clean``), and the
weaker cues (``I'm``, sign-offs, form fields) also need the name to end at
punctuation or the end of the line. Names with no cue ("I talked to Ana") are
left to :class:`~chatkeep.privacy.ner.PresidioRecognizer`.

Every pattern is a bounded literal alternation or a bounded run, and each cue
reads at most a few words after it, so the work is linear in the text length.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterator

from chatkeep.privacy.base import Span

__all__ = ["PersonRecognizer"]

#: Confidence given to names found behind a cue (below validated patterns' 1.0).
PERSON_SCORE = 0.85
#: Most name words read after one cue ("María José García López" is four).
MAX_NAME_WORDS = 4

# One name word: letters, joined by at most three hyphens or apostrophes ("Jean-Luc",
# "O'Brien"). Bounded so a 100 KB run of letters costs one bounded look, not a scan.
_WORD = re.compile(r"[^\W\d_]{1,30}(?:[-'’][^\W\d_]{1,30}){0,3}")
# Lower-case particles that may stand between name words ("Ana de la Fuente").
_PARTICLE = re.compile(
    r"(?:de la|de las|de los|del|de|van der|van den|van de|van|von der|von|der|den|da|das|dos|"
    r"do|di|du|des|le|la|zu|bin|ibn|al|el|ter|ten)[ \u00a0]"
)
# Between two people after a greeting: "Hi Ana and Tom,".
_CONJUNCTION = re.compile(r"[ \u00a0](?:and|&|y|e|et|und)[ \u00a0]", re.IGNORECASE)
# Space between name words: one space or no-break space, or a middle initial "John F. Kennedy".
_GAP = re.compile(r"[ \u00a0](?:[A-Z]\.[ \u00a0])?")

# Greetings, sign-offs and "Hi, this is" count only where a line or a sentence starts:
# :func:`_cue_starts` finds those places, and these patterns are matched there.
_LINE_LEAD = re.compile(r"[ \t>*\"“]*")
_SENTENCE_END = re.compile(r"[.!?][ \t]+[>*\"“]*")
_GREETING = re.compile(
    r"(?:hi|hello|hey|hiya|heya|hallo|hullo|howdy|good (?:morning|afternoon|evening|day)|"
    r"morning|dear|dearest|hola|buenos d[ií]as|buenas tardes|buenas noches|buenas|"
    r"querid[oa]s?|estimad[oa]s?|apreciad[oa]s?|bonjour|bonsoir|salut|coucou|"
    r"ch[eè]re?s?|guten (?:morgen|tag|abend)|moin|servus|gr[üu][ßs] gott|gr[üu]ezi|"
    r"lieber?s?|sehr geehrter?s?|ciao|ol[áa])"
    r"(?P<sep>[ \t]*[,:!][ \t]*|[ \t]+)",
    re.IGNORECASE,
)
_SIGN_OFF = re.compile(
    r"(?P<phrase>(?:many |thanks? |thank you )?thanks(?: again| so much| a lot| in advance)?|"
    r"thank you(?: so much| very much| again| in advance)?|thx|cheers|"
    r"(?:best|kind|kindest|warm|warmest|many) (?:regards|wishes)|regards|rgds|"
    r"(?:yours )?(?:sincerely|truly|faithfully)|respectfully|all the best|take care|"
    r"talk soon|speak soon|"
    r"(?:muchas |mil )?gracias(?: de antemano)?|un (?:cordial )?saludo|saludos(?: cordiales)?|"
    r"atentamente|cordialmente|un abrazo|abrazos|un beso|besos|hasta pronto|"
    r"merci(?: beaucoup| d'avance| d’avance)?|(?:bien )?cordialement|bien [àa] vous|"
    r"amicalement|(?:sinc[èe]res )?salutations|bonne (?:journ[ée]e|soir[ée]e)|[àa] bient[ôo]t|"
    r"bises|danke(?: sch[öo]n| sehr)?|vielen dank|(?:viele|liebe|beste|herzliche|sch[öo]ne|"
    r"freundliche) gr[üu](?:ß|ss)e|mit freundlichen gr[üu](?:ß|ss)en|gru(?:ß|ss)|"
    r"gr[üu](?:ß|ss)e|bis bald|tsch[üu]ss|best|love|ta|br|lg|vg|mfg|--)(?![\w-])"
    r"(?P<sep>[ \t]*[,.!:;\-–—]?[ \t]*(?:\r?\n[ \t]*){0,2})",
    re.IGNORECASE,
)
# Self-introductions. The leading look-ahead lets the regex engine skip to likely first
# letters. "strong" ones state a name outright ("my name is"); after "I'm", "soy" and
# "je suis" an adjective may follow ("I'm Happy"), so the name must end the clause; "Ich
# bin Student" is German for "I am a student", so there a name needs two words.
_INTRO = re.compile(
    r"(?=[MmJjIiSs])(?<!\w)(?:"
    r"(?P<strong>my name is|my name['’]s|me llamo|mi nombre es|je m['’]appelle|mon nom est|"
    r"moi c['’]est|ich hei(?:ß|ss)e|mein name ist)[ \t]*:?|"
    r"(?P<ich>ich bin)|"
    r"(?P<weak>i['’]m|i am|je suis|(?:^|(?<=[.!?,;:] )|(?<=\by )|(?<=\byo )|(?<=\bhola ))soy)"
    r")[ \t]+",
    re.IGNORECASE | re.MULTILINE,
)
# "Hi, this is Tyler from ..." (on the phone or in chat): only right after a greeting.
_THIS_IS = re.compile(
    r"(?:hi|hello|hey|hiya|good (?:morning|afternoon|evening))[ \t]*[,!.]?\s{1,3}"
    r"(?:this is|it['’]s|it is)[ \t]+",
    re.IGNORECASE,
)
_FIELD = re.compile(
    r"^[ \t]*(?:(?:full|first|last|given|family|customer|client|contact|my|your)[ \t]+)?"
    r"(?:name|nombre(?:[ \t]+(?:completo|y apellidos))?|apellidos?|nom(?:[ \t]+complet)?|pr[ée]nom|"
    r"vorname|nachname)[ \t]*[:=][ \t]*",
    re.IGNORECASE | re.MULTILINE,
)
# Titles are matched with their capital: "miss" and "frau" in running text are other words.
_TITLE_WORDS = (
    r"Mrs|Mr|Ms|Mx|Miss|Dra|Dr|Doctora|Doctor|Docteur|Doktor|Prof|Professor|Sra|Srta|Sr|Dña|Dª|"
    r"Doña|[Ss]eñor|[Ss]eñora|"
    r"[Ss]eñorita|Mme|Mlle|[Mm]onsieur|[Mm]adame|[Mm]ademoiselle|Herrn|Herr|Frau|"
    r"Grandma|Grandpa|Granny|Aunt|Auntie|Uncle|T[ií]a|T[ií]o|Tante|Onkel|Oma|Opa"
)
_TITLE_BODY = (
    r"(?:(?:" + _TITLE_WORDS + r")\.?|M\.)[ \t\u00a0]+"
    r"(?:(?:Dra|Dr|Prof|med|Ing|Dipl|D|Dña|Dª)\.?[ \t\u00a0]+){0,3}"
)
_TITLE = re.compile(r"(?=[MDPSsHFGAUTOmd])(?<![\w.\-'’])" + _TITLE_BODY)
# Just after a cue word a title may stand before the name: "Dear Mr. Lee", "Saludos, Dr. Ruiz".
_TITLE_AFTER_CUE = re.compile(_TITLE_BODY)
# A street before "Dr." makes it "Drive": "1420 Maple Dr. Springfield".
_STREET_BEFORE = re.compile(r"\d[\w\-]*[ \t]+(?:[^\W\d_][\w'’\-]*\.?[ \t]+){1,4}$")
# Blanks read after a name (bounded: a name followed by a long blank run stands alone).
_MAX_BLANKS = 64
_BLANKS = re.compile(rf"[ \t\u00a0]{{0,{_MAX_BLANKS}}}")
_ADDRESS = re.compile(r"<([^\s<>@]{1,64})@[^\s<>@]{1,253}>")
_QUOTES = "\"'“”«»"


def _words(listing: str) -> frozenset[str]:
    return frozenset(listing.split())


#: Words that follow a cue but are not names: groups, roles, politeness, sentence
#: starters, assistants and brands, nationalities. Compared case-folded.
_STOP_WORDS = _words(
    """
    a about after again all also am an and another any anybody anyone are as at back bad be
    because before both but by can could day did do does done each either even every
    everybody everyone everything few for from had has have he her here hers him his how
    however i if in is it its just let many may me might more most much must my neither no
    nobody none nor not nothing now of on one only or other our out over own same shall she
    should since so some someone something such than that the their them then there these
    they this those though through to too two under until up upon us very was we well were
    what when where whether which while who whom whose why will with within without would yet
    you your yours
    again already also anyway btw fyi hope important info just maybe okay ok please pls quick
    question re fwd fw sorry still thanks thank urgent asap reminder regarding following
    update issue issues problem problems request help need needed order invoice ticket case
    account hey hi hello bye cheers regards best kind warm sincerely yes yeah yep nope sure
    great perfect good fine cool nice lol tel tél fax nr no nº
    assistant boss bot buddy client clients colleague colleagues customer customers dear dude
    folks friend friends gentlemen guys human ladies ma'am maam madam man manager mate member
    members operator people sir sirs staff team user users valued world everyone y'all
    admin administrator agent billing finance hiring legal management marketing payroll
    sales security service services support accounts department desk helpdesk office
    morning afternoon evening night today tomorrow yesterday weekend
    monday tuesday wednesday thursday friday saturday sunday
    happy sorry glad new interested ready trying using unable really confused frustrated
    siri alexa google cortana chatgpt gpt gemini copilot bard bixby amazon apple microsoft
    facebook netflix spotify paypal uber slack zoom whatsapp
    american australian austrian belgian brazilian british canadian catalan chinese dutch
    english european french german greek indian irish italian japanese latina latino mexican
    polish portuguese russian scottish spanish swedish swiss turkish welsh
    vegan vegetarian diabetic disabled deaf blind student freelancer retired self-employed
    yo tú usted mi mis tu tus su sus nuestro nuestra el la los las un una unos unas lo le les
    es está están estoy tengo tenemos necesito necesitamos quería quiero queremos quisiera
    puedo puede pueden podría podrías hay he ha hemos por para con sin sobre tras desde
    hola gracias saludos saludo atentamente cordialmente buenas buenos buen estimado estimada
    querido querida pregunta problema pedido factura consulta duda urgente ayuda
    todos todas equipo señores señoras cliente clienta usuario usuaria amigos amigas
    compañeros compañeras soporte atención departamento dirección premium autónomo autónoma
    estudiante jubilado jubilada
    español española españoles francés francesa inglés inglesa alemán alemana
    je j'ai tu il elle on nous vous ils elles mon ma mes ton ta tes son sa ses notre nos votre
    vos leur leurs le les l un une des du ce cet cette ces est suis ai avons avez voudrais
    voulais veux pouvez peux pourriez petite petit question problème commande facture
    bonjour bonsoir salut merci beaucoup cordialement bien bonne amicalement salutations
    tous toutes équipe equipe madame monsieur mesdames messieurs mademoiselle collègues amis
    direction client cliente française français belge allemand allemande anglais anglaise
    suisse
    ich du er sie es wir ihr mein meine meinen meinem meiner dein deine sein seine unser
    unsere euer eure ihre ihr das die der dem den des ein eine einen einem einer ist bin sind
    habe haben hat hatte kann können könnten möchte würde bitte danke vielen dank frage
    problem bestellung rechnung paket vorgang konto kreditkarte festnetz handy termin
    hallo moin servus grüße grüsse gruß gruss liebe lieber liebes guten tag
    zusammen alle leute kollegen kolleginnen kunden kundinnen kunde kundin freunde
    freundinnen damen herren mitglieder eltern nachbarn kundenservice vertrieb buchhaltung
    geschäftsführung deutscher deutsche österreicher österreicherin schweizer schweizerin
    neukunde rentner rentnerin
    co mom mum mommy mummy mother dad daddy father mama papa mamá papá maman mutti vati
    honey sweetie darling babe baby love diary bro sis son cariño chéri chérie schatz
    """
)
#: Brands and roles that follow a title: "Mr. Clean", "Dr. Martens", "Dear Madam Chair".
_STOP_AFTER_TITLE = _words(
    """
    clean pepper martens oetker who robot potato muscle bean pac-man coffee proper freeze
    scholl bronner men right universe president chair chairman chairwoman speaker secretary
    mayor ambassador director manager customer client cliente kunde kundin team
    the a an and or of to in on for with you de la le el los las les der die das und et y
    mr mrs ms mx miss dr prof professor sr sra srta dña doña señor señora señorita mme mlle
    monsieur madame mademoiselle herr herrn frau grandma grandpa granny aunt auntie uncle
    dra doctor doctora docteur doktor marvel strange evil
    """
)
_STOP_WORDS = _STOP_WORDS | _STOP_AFTER_TITLE
#: Words that make a whole display name or signature an organisation ("Acme Billing").
_ORG_WORDS = _words(
    """
    team support service services billing sales notifications notification calendar inc ltd
    llc gmbh ag corp company bank banco group shop store customer care help helpdesk info
    news newsletter alerts security accounts account payroll orders delivery noreply no-reply
    admin office department departamento equipo équipe kundenservice marketing management
    direction dirección facturación soporte atención recursos humanos hr crew staff
    """
)
#: After "I'm" / "soy" / "je suis": states and activities that are not names.
_NOT_AFTER_IM = _words(
    """
    afraid alive alone annoyed asking available aware away based busy calling certain
    concerned contacting curious currently disappointed done exhausted free getting going
    having hoping hungry ill late leaving located locked logged lost married new off online
    out pleased pregnant retired sick signed single stuck tired totally unsure upset waiting
    wondering worried writing excited stressed annoyed scared bored amazed surprised shocked
    impressed satisfied dissatisfied embarrassed overwhelmed relieved thrilled delighted
    puzzled stumped blocked banned ingeniero ingeniera médico médica abogado abogada
    profesor profesora
    """
)
# Words that may follow a name given after "I'm": "I'm Ana from billing", "soy Marta, de ...".
_AFTER_INTRO = _words("from and here with at of in on again y de del et du und aus von vom bei")
# Words that start a clause after a name with no comma: "Hi Ana how are you", "Hola Carlos
# necesito ayuda". "Hi Quick question" and "Hallo Paket ist da" do not go on like this.
_CLAUSE_STARTS = _words(
    """
    how can could would will please i i'm i’m i've i’ve i'd i’d just thanks thank hope are do
    did is you we what when where which
    cómo como qué que puedes podrías podrias necesito te me quería queria gracias ya
    comment est-ce tu vous je merci pouvez peux ça
    wie kannst können könnten ich du danke bitte hast haben
    and y et und
    """
)
# Sign-offs that may address a name with no comma between: "Thanks John!", "Danke Nils!".
_THANKS = _words("thanks thx cheers gracias merci danke dank you much lot beaucoup sehr schön")
# First letters of greetings and sign-offs (checked before trying their patterns).
_CUE_INITIALS = frozenset("hHgGmMdDbBqQeEaAsScClLoOtTrRkKwWyYuUfFvV-àÀ")
# Greeting words a title "M." may follow without being taken for an initial.
_BEFORE_M_DOT = _words("bonjour bonsoir cher chère merci madame monsieur dear hi hello")


class PersonRecognizer:
    """Finds people's names where a greeting, sign-off, introduction, title or header says so.

    Dependency-free and language-aware for English, Spanish, French and German;
    it trades recall for precision (see the module documentation): names with no
    cue are only found by the optional NER backend.
    """

    entity_types: tuple[str, ...] = ("PERSON",)

    def find(self, text: str) -> Iterator[Span]:
        """Yield each name found after a cue in ``text`` once."""
        seen: set[tuple[int, int]] = set()
        for start, end in self._candidates(text):
            if (start, end) not in seen:
                seen.add((start, end))
                yield Span(start, end, "PERSON", text[start:end], PERSON_SCORE)

    def _candidates(self, text: str) -> Iterator[tuple[int, int]]:
        """Every place a name may stand, cue by cue (greetings and sign-offs, "my name
        is", form fields, titles, display names of addresses), in that order."""
        yield from _after_cues(text)
        yield from _after_intros(text)
        for match in _FIELD.finditer(text):
            yield from _field_value(text, match.end())
        yield from _after_titles(text)
        if "@" in text:
            for match in _ADDRESS.finditer(text):
                found = _display_name(text, match.start(), match.group(1))
                if found is not None:
                    yield found


def _after_cues(text: str) -> Iterator[tuple[int, int]]:
    """Names after a greeting ("Hi Ana,", "this is Ana") or a sign-off ("Best, Ana")."""
    for pos in _cue_starts(text):
        greeting = _GREETING.match(text, pos)
        if greeting is not None:
            punctuated = not greeting.group("sep").isspace()
            yield from _names_after_greeting(text, greeting.end(), punctuated)
            this_is = _THIS_IS.match(text, pos)
            if this_is is not None:
                yield from _strict(text, this_is.end(), allow_connectors=True)
        sign_off = _SIGN_OFF.match(text, pos)
        if sign_off is not None:
            yield from _name_after_sign_off(text, sign_off)


def _after_intros(text: str) -> Iterator[tuple[int, int]]:
    """Names after an introduction: strong ("my name is"), German ("ich bin"), weak."""
    for match in _INTRO.finditer(text):
        if match.group("strong") is not None:
            found = _read_name(text, match.end())
            if found is not None and not _continues_word(text, found[1]):
                yield found
        elif match.group("ich") is not None:
            for found in _strict(text, match.end(), allow_connectors=True):
                if _word_count(text, *found) >= 2:
                    yield found
        else:
            yield from _weak_intro(text, match.end())


def _after_titles(text: str) -> Iterator[tuple[int, int]]:
    """Names after a real title ("Dr. Ana García", not "Dr. appointment")."""
    for match in _TITLE.finditer(text):
        if _title_is_real(text, match.start()):
            found = _read_name(text, match.end(), _STOP_AFTER_TITLE)
            if found is not None and not _continues_word(text, found[1]):
                yield found


def _cue_starts(text: str) -> Iterator[int]:
    """Where a greeting or sign-off may stand: each line start and each sentence start."""
    line_start = 0
    while line_start < len(text):
        lead = _LINE_LEAD.match(text, line_start)
        pos = lead.end() if lead is not None else line_start
        if pos < len(text) and text[pos] in _CUE_INITIALS:
            yield pos
        newline = text.find("\n", line_start)
        if newline == -1:
            break
        line_start = newline + 1
    for match in _SENTENCE_END.finditer(text):
        if match.end() < len(text) and text[match.end()] in _CUE_INITIALS:
            yield match.end()


def _name_after_sign_off(text: str, sign_off: re.Match[str]) -> Iterator[tuple[int, int]]:
    """The name signed after "Thanks," / "Best regards,\n" / "Saludos," on its own.

    "Thanks John!" addresses John, but with no comma or line break "Love Paris." and
    "Best Buy." sign nothing: there the name must end the line.
    """
    found = _name_after_cue(text, sign_off.end())
    if found is None:
        return
    separator = sign_off.group("sep")
    bare = separator.isspace() and "\n" not in separator
    direct = sign_off.group("phrase").casefold().split()[-1] in _THANKS
    if _ends_clause(text, found[1], ",.!" if direct or not bare else ""):
        yield found


def _names_after_greeting(text: str, pos: int, punctuated: bool) -> Iterator[tuple[int, int]]:
    """The addressee(s) after a greeting: "Hi Ana,", "Dear Mr. Lee", "Hi Emma and Noah".

    The name must end at punctuation or the end of the line ("Hola, Mi cuenta está
    bloqueada" is a sentence), or, when no comma came between ("Hi Ana how are
    you"), go on into a word that starts a clause.
    """
    found = _name_after_cue(text, pos)
    while found is not None:
        end = found[1]
        conjunction = _CONJUNCTION.match(text, end)
        if conjunction is not None and _name_after_cue(text, conjunction.end()):
            yield found
            found = _name_after_cue(text, conjunction.end())
            continue
        if _ends_clause(text, end, ",.!?;-–—") or (
            not punctuated and _next_word(text, end) in _CLAUSE_STARTS
        ):
            yield found
        return


def _weak_intro(text: str, pos: int) -> Iterator[tuple[int, int]]:
    """A name after "I'm" / "soy" / "je suis", unless it reads as a state ("I'm Waiting")."""
    found = _read_name(text, pos)
    if found is None:
        return
    first = text[found[0] : found[1]].split()[0].casefold()
    single = _word_count(text, *found) == 1
    if single and (first in _NOT_AFTER_IM or (len(first) > 4 and first.endswith("ing"))):
        return
    yield from _strict(text, pos, allow_connectors=True)


def _strict(text: str, pos: int, *, allow_connectors: bool) -> Iterator[tuple[int, int]]:
    """The name at ``pos`` if it ends its clause: punctuation, end of line or text.

    With ``allow_connectors`` a name may also go on into "from ...", "and ...":
    "I'm Ana from billing".
    """
    found = _read_name(text, pos)
    if found is None:
        return
    if _ends_clause(text, found[1], ",.!?;)-–—") or (
        allow_connectors and _next_word(text, found[1]) in _AFTER_INTRO
    ):
        yield found


def _ends_clause(text: str, end: int, marks: str) -> bool:
    """True when a name ending at ``end`` is followed by one of ``marks``, a line end or nothing.

    A colon counts only at the end of a line ("Estimada Sra. Navarro:"), and a full
    stop only before a space or line end, so "Hallo, Festnetz: 0361..." and
    "Elaine.James@x.com" are not names.
    """
    if _continues_word(text, end):
        return False
    blanks = _BLANKS.match(text, end)
    rest = blanks.end() if blanks is not None else end
    if rest == len(text) or text[rest] in "\r\n" or rest - end == _MAX_BLANKS:
        return True
    mark = text[rest]
    if mark == ":":
        return text[rest + 1 : rest + 2] in ("", "\n", "\r")
    if mark == ".":
        # A sentence ends there: "Álvaro. El pedido", not an abbreviation: "Tél. 01 29 61".
        after = text[rest + 1 : rest + 3].lstrip(" \t")[:1]
        return "." in marks and rest == end and (not after or after in "\r\n" or after.isupper())
    return mark in marks


def _next_word(text: str, end: int) -> str:
    """The case-folded word after one space at ``end`` ("" if none)."""
    if text[end : end + 1] != " ":
        return ""
    word = _WORD.match(text, end + 1)
    return word.group().casefold() if word is not None else ""


def _field_value(text: str, pos: int) -> Iterator[tuple[int, int]]:
    """The value of a "Name:" field, when the name is the whole value."""
    found = _read_name(text, pos)
    if found is not None and _ends_clause(text, found[1], ",;|("):
        yield found


def _title_is_real(text: str, start: int) -> bool:
    """False for "Dr." as Drive ("12 Elm Dr. Austin") and "M." as an initial ("John M. Smith")."""
    line_start = max(text.rfind("\n", max(0, start - 60), start) + 1, start - 60)
    before = text[line_start:start]
    if text.startswith("Dr", start) and _STREET_BEFORE.search(before):
        return False
    if text.startswith("M.", start):
        words = before.split()
        if words:
            previous = words[-1].strip(",;:")
            if previous[:1].isupper() and previous.casefold() not in _BEFORE_M_DOT:
                return False
    return True


def _name_after_cue(text: str, pos: int) -> tuple[int, int] | None:
    """The name at ``pos``, or after a title standing there ("Dear Mr. Lee", "Saludos, Dr. Ruiz").

    After a title any capitalised word but a brand is a name ("Chère Madame Petit").
    """
    title = _TITLE_AFTER_CUE.match(text, pos)
    if title is None:
        return _read_name(text, pos)
    return _read_name(text, title.end(), _STOP_AFTER_TITLE)


def _read_name(
    text: str, pos: int, stop_words: frozenset[str] = _STOP_WORDS
) -> tuple[int, int] | None:
    """The span of up to :data:`MAX_NAME_WORDS` name words starting exactly at ``pos``."""
    end = -1
    words = 0
    cursor = pos
    while words < MAX_NAME_WORDS:
        match = _WORD.match(text, cursor)
        if match is None:
            break
        word_end = match.end()
        word = match.group()
        if word_end < len(text) and text[word_end].isalpha():
            break  # longer than any name word: not a name
        possessive = len(word) > 3 and word.endswith(("'s", "’s"))
        if possessive:
            word, word_end = word[:-2], word_end - 2
        if not _is_name_word(word, stop_words):
            break
        end = word_end
        words += 1
        if possessive:
            break  # "Mr. Smith's order": the name ends before the "'s"
        gap = _GAP.match(text, end)
        if gap is None:
            break
        cursor = gap.end()
        particle = _PARTICLE.match(text, cursor)
        # "Ana de la Fuente", "Vincent van Gogh"; but "Daniel Ruiz de Logística" is a company.
        if particle is not None and (words == 1 or " " in particle.group()[:-1]):
            cursor = particle.end()
    return (pos, end) if end > pos else None


def _is_name_word(word: str, stop_words: frozenset[str] = _STOP_WORDS) -> bool:
    """Capitalised, with a lower-case letter, each part after "-" or "'" capitalised too."""
    if len(word) < 2 or not word[0].isupper() or not any(c.islower() for c in word):
        return False
    if word.casefold() in stop_words:
        return False
    parts = re.split(r"[-'’]", word)
    return all(part[:1].isupper() and part.casefold() not in stop_words for part in parts[1:])


def _continues_word(text: str, end: int) -> bool:
    """True when the name runs on into an address, handle or number ("Elaine.James@x.com")."""
    if end >= len(text):
        return False
    char = text[end]
    if char.isalnum() or char in "_@":
        return True
    following = text[end + 1 : end + 2]
    if char in "'’" and following in "sS":
        return text[end + 2 : end + 3].isalnum()  # a possessive "'s" ends the name
    return char in ".-/'’" and following.isalnum()


def _word_count(text: str, start: int, end: int) -> int:
    return sum(1 for word in text[start:end].split() if word[:1].isupper())


def _display_name(text: str, at: int, local: str) -> tuple[int, int] | None:
    """The person's name before ``<local@domain>``, if it is one.

    A display name is taken only if none of its words is an organisation word and
    one of them (or its initial-and-surname form) appears in the local part:
    ``Ana García <agarcia@...>`` yes, ``Deutsche Bahn <noreply@bahn.de>`` no.
    """
    end = at
    while end > 0 and text[end - 1] in " \t\u00a0":
        end -= 1
    quoted = end > 0 and text[end - 1] in _QUOTES
    if quoted:
        end -= 1
    line_start = max(text.rfind("\n", max(0, end - 120), end) + 1, end - 120)
    # Walk back over name words (and particles between them) that end right at ``end``.
    start = left = end
    names: list[str] = []
    for match in reversed(list(_WORD.finditer(text, line_start, end))):
        gap = text[match.end() : left]
        if gap not in (("",) if left == end else (" ", "\u00a0")):
            break
        word = match.group()
        if word.casefold() in _ORG_WORDS:
            return None
        if names and _PARTICLE.fullmatch(word + " "):
            left = match.start()
            continue
        if not _is_name_word(word) or len(names) == MAX_NAME_WORDS:
            break
        names.insert(0, word)
        start = left = match.start()
    if not names:
        return None
    if quoted and text[start - 1 : start] not in tuple(_QUOTES):
        return None
    if start > 0 and (text[start - 1].isalnum() or text[start - 1] in "@._"):
        return None
    return (start, end) if _matches_local_part(names, local) else None


def _matches_local_part(words: list[str], local: str) -> bool:
    """Whether a name word, or initial plus surname, is in the address's local part."""
    forms = {_ascii_fold(local.casefold())}
    for variant in _variants(words):
        surname = variant[-1]
        if any(len(word) >= 3 and word in form for word in variant for form in forms):
            return True
        if len(variant) >= 2 and any(variant[0][0] + surname in form for form in forms):
            return True
    return False


def _variants(words: list[str]) -> list[list[str]]:
    """Lower-case ASCII spellings of ``words``: "Schröder" as "schroder" and "schroeder"."""
    folded = [word.casefold() for word in words]
    german = [
        w.replace("ä", "ae").replace("ö", "oe").replace("ü", "ue").replace("ß", "ss")
        for w in folded
    ]
    return [[_ascii_fold(w) for w in folded], [_ascii_fold(w) for w in german]]


def _ascii_fold(value: str) -> str:
    decomposed = unicodedata.normalize("NFKD", value)
    return "".join(c for c in decomposed if c.isascii() and c.isalnum())
