import { open } from "@tonbo/sqlite-ursula";

const db = open(process.env.URSULA_STREAM_URL ?? "http://127.0.0.1:4437/demo/notes");
db.exec("CREATE TABLE IF NOT EXISTS notes(id INTEGER PRIMARY KEY, body TEXT)");
db.prepare("INSERT INTO notes(body) VALUES (?)").run("hello"); // returns once the stream holds it
console.log(db.prepare("SELECT id, body FROM notes").all());
db.close();
